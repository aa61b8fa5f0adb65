// Command journalsink stands in for systemd-journald in integration tests:
// it listens on a datagram socket speaking the journal's native protocol
// (the path Docker's journald log driver writes to) and appends each entry
// as one JSON object per line to an output file.
//
//	journalsink <socket path> <output file>
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: journalsink <socket> <output>")
		os.Exit(2)
	}
	os.Remove(os.Args[1])
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: os.Args[1], Net: "unixgram"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "journalsink:", err)
		os.Exit(1)
	}
	if err := os.Chmod(os.Args[1], 0o666); err != nil {
		fmt.Fprintln(os.Stderr, "journalsink:", err)
		os.Exit(1)
	}
	out, err := os.OpenFile(os.Args[2], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "journalsink:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(out)
	buf := make([]byte, 1<<20)
	for {
		n, _, _, _, err := conn.ReadMsgUnix(buf, make([]byte, 64))
		if err != nil {
			fmt.Fprintln(os.Stderr, "journalsink:", err)
			os.Exit(1)
		}
		enc.Encode(parse(buf[:n]))
	}
}

// parse decodes KEY=VALUE\n fields and the binary-safe form
// KEY\n<uint64 little-endian length><value>\n.
func parse(b []byte) map[string]string {
	fields := map[string]string{}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			break
		}
		line := b[:nl]
		if eq := bytes.IndexByte(line, '='); eq >= 0 {
			fields[string(line[:eq])] = string(line[eq+1:])
			b = b[nl+1:]
			continue
		}
		rest := b[nl+1:]
		if len(rest) < 8 {
			break
		}
		size := binary.LittleEndian.Uint64(rest[:8])
		if uint64(len(rest)-8) < size {
			break
		}
		fields[string(line)] = string(rest[8 : 8+size])
		b = rest[8+size:]
		if len(b) > 0 && b[0] == '\n' {
			b = b[1:]
		}
	}
	return fields
}
