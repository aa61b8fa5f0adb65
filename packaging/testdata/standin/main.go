// Command standin is a stand-in for sandbox-host/-broker/-reaper used only by the
// packaging test: socket activation on fd 3, sd_notify READY=1, and a report
// of its identity and credentials over the socket.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

func notify(s string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	c.Write([]byte(s))
}

func report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "uid=%d gid=%d groups=", os.Getuid(), os.Getgid())
	gs, _ := os.Getgroups()
	fmt.Fprintln(&b, gs)
	fmt.Fprintf(&b, "args=%q\n", os.Args)
	if d := os.Getenv("CREDENTIALS_DIRECTORY"); d != "" {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			v, err := os.ReadFile(filepath.Join(d, e.Name()))
			fmt.Fprintf(&b, "cred %s len=%d err=%v\n", e.Name(), len(v), err)
		}
	} else {
		fmt.Fprintln(&b, "no CREDENTIALS_DIRECTORY")
	}
	_, err := os.ReadFile("/etc/roundtable-sandbox/sandbox.yaml")
	fmt.Fprintf(&b, "read config: %v\n", err)
	ents, err := os.ReadDir("/run/roundtable-sandbox/policies")
	fmt.Fprintf(&b, "policies: %d entries err=%v\n", len(ents), err)
	return b.String()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "completion" {
		os.Exit(1)
	}
	// sandbox-credset@.service: the stand-in copies every credential (the
	// real command copies those the policy names; pkg/credset tests that).
	if len(os.Args) > 1 && os.Args[1] == "credset" {
		out := os.Getenv("RUNTIME_DIRECTORY")
		ents, err := os.ReadDir("/etc/roundtable-sandbox/credentials")
		if err != nil || out == "" {
			fmt.Fprintln(os.Stderr, "credset stand-in:", err, out)
			os.Exit(2)
		}
		for _, e := range ents {
			if e.Type().IsRegular() {
				data, _ := os.ReadFile(filepath.Join("/etc/roundtable-sandbox/credentials", e.Name()))
				_ = os.WriteFile(filepath.Join(out, e.Name()), data, 0o400)
			}
		}
		return
	}
	if filepath.Base(os.Args[0]) == "sandbox-reaper" {
		fmt.Print(report())
		return
	}
	if os.Getenv("LISTEN_FDS") != "1" {
		fmt.Fprintln(os.Stderr, "no socket passed")
		os.Exit(2)
	}
	l, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	notify("READY=1")
	http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, report())
	}))
}
