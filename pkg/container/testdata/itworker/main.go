// Command itworker is the integration tests' stand-in worker: a static
// binary for a FROM scratch image. Its first stdin line picks a behaviour:
//
//	hang   ignore SIGTERM and never exit (PID 1 that only SIGKILL ends)
//	framehang  print one line ("framed"), then hang as hang does
//	flood  write stdout forever
//	probe  print what the container looks like from inside, as JSON
//	exit N echo nothing and exit with status N
//	anything else: echo all of stdin to stdout (cat)
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	in, _ := io.ReadAll(bufio.NewReader(os.Stdin))
	first, _, _ := bytes.Cut(in, []byte("\n"))
	cmd := strings.TrimSpace(string(first))
	switch {
	case cmd == "hang":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		os.Stdout.WriteString("hanging\n")
		for {
			time.Sleep(time.Hour)
		}
	case cmd == "framehang":
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		os.Stdout.WriteString("framed\n")
		for {
			time.Sleep(time.Hour)
		}
	case cmd == "flood":
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for {
			if _, err := os.Stdout.Write(chunk); err != nil {
				os.Exit(3)
			}
		}
	case cmd == "probe":
		probe()
	case strings.HasPrefix(cmd, "exit "):
		n, _ := strconv.Atoi(strings.TrimPrefix(cmd, "exit "))
		os.Stderr.WriteString("exiting on request\n")
		os.Exit(n)
	default:
		os.Stdout.Write(in)
	}
}

func writable(dir string) bool {
	f, err := os.CreateTemp(dir, "probe-")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

func status(field string) string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func probe() {
	var ifaces []string
	if list, err := net.Interfaces(); err == nil {
		for _, i := range list {
			ifaces = append(ifaces, i.Name)
		}
	}
	wd, _ := os.Getwd()
	_, dockerSock := os.Stat("/var/run/docker.sock")
	out := map[string]any{
		"uid":               os.Getuid(),
		"gid":               os.Getgid(),
		"groups":            status("Groups"),
		"env":               os.Environ(),
		"cwd":               wd,
		"rootWritable":      writable("/"),
		"tmpWritable":       writable("/tmp"),
		"workspaceWritable": writable("/workspace"),
		"brokerWritable":    writable("/run/broker"),
		"capEff":            status("CapEff"),
		"capBnd":            status("CapBnd"),
		"noNewPrivs":        status("NoNewPrivs"),
		"interfaces":        ifaces,
		"dockerSocket":      dockerSock == nil,
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
