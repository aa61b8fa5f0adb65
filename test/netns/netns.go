// Package netns runs a test in a network namespace of its own, for tests
// that add interfaces and addresses (the box's own addresses, for example).
//
// Guarantee: nothing the test adds or dials leaves that namespace. It
// starts with lo only and no route beyond it, so an address the test adds
// (a public-looking one included) exists only there, and a dial to any
// other address fails at once (no route): the test never reaches the
// machine's network or the internet. The namespace ends with the test's
// process, taking its interfaces with it.
//
// Root only (interfaces need CAP_NET_ADMIN): tests skip without root or
// without Switch (test/integration.sh sets it), naming what enables them.
package netns

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Switch names the environment variable that enables the tests ("1").
const Switch = "SANDBOX_IT_NETNS"

// inside marks the re-run of a test inside its own namespace.
const inside = "SANDBOX_IT_NETNS_INSIDE"

// Enter reports whether the test already runs in its own network namespace.
// When it does not, it runs the test (t.Name(), a top-level test) again in a
// fresh one (unshare --net, lo up), reports that run's outcome on t and
// returns false: the caller then returns at once.
func Enter(t *testing.T) bool {
	t.Helper()
	if os.Getenv(inside) == "1" {
		ifs, err := net.Interfaces()
		if err != nil {
			t.Fatalf("listing interfaces: %v", err)
		}
		for _, i := range ifs {
			if i.Flags&net.FlagLoopback == 0 {
				t.Fatalf("interface %s in the test's network namespace at its start: not a fresh namespace", i.Name)
			}
		}
		for _, fam := range []string{"-4", "-6"} {
			if out := ip(t, fam, "route", "show", "table", "all"); strings.Contains(out, "default") {
				t.Fatalf("a default route in the test's network namespace:\n%s", out)
			}
		}
		return true
	}
	if os.Getenv(Switch) != "1" {
		t.Skipf("network namespace test skipped: set %s=1 and run as root (test/integration.sh does both)", Switch)
	}
	if os.Geteuid() != 0 {
		t.Skipf("network namespace test skipped: %s is set but the test needs root (it adds interfaces in a network namespace of its own)", Switch)
	}
	for _, c := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("network namespace test skipped: %s not found (util-linux, iproute2)", c)
		}
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("netns.Enter must be called from a top-level test, not %s", t.Name())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "--", "sh", "-c", `ip link set lo up && exec "$@"`, "sh",
		os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v", "-test.timeout=150s")
	cmd.Env = append(os.Environ(), inside+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own (unshare --net):\n%s", out)
	if err != nil {
		t.Fatalf("the run in its own network namespace failed: %v", err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the run in its own network namespace did not pass %s", t.Name())
	}
	return false
}

// IP runs ip(8) with args in the test's namespace (call it only after Enter
// returned true) and returns its output; failing, it fails the test.
func IP(t *testing.T, args ...string) string {
	t.Helper()
	if os.Getenv(inside) != "1" {
		t.Fatal("netns.IP outside the test's own network namespace")
	}
	return ip(t, args...)
}

func ip(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// AddLink adds an interface called name to the test's namespace and sets it
// up: a dummy interface, or where the kernel has no dummy driver one end of a
// veth pair (the other end, name+"p", also up, in the same namespace).
func AddLink(t *testing.T, name string) {
	t.Helper()
	if os.Getenv(inside) != "1" {
		t.Fatal("netns.AddLink outside the test's own network namespace")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if exec.CommandContext(ctx, "ip", "link", "add", name, "type", "dummy").Run() != nil {
		ip(t, "link", "add", name, "type", "veth", "peer", "name", name+"p")
		ip(t, "link", "set", name+"p", "up")
	}
	ip(t, "link", "set", name, "up")
}

// AddAddr gives dev the address addr (a single address: /32, /128; IPv6
// without duplicate detection) and returns once the kernel's local route
// for it exists, so a connect to it is delivered to the box. The address
// itself exists (a bind succeeds) a little earlier than that route, which
// IPv6 inserts from a work queue after ip(8) returned.
func AddAddr(t *testing.T, dev, addr string) {
	t.Helper()
	if os.Getenv(inside) != "1" {
		t.Fatal("netns.AddAddr outside the test's own network namespace")
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	// Subscribed before the address is added: the route's arrival cannot
	// be missed.
	events := subscribe(t, unix.RTMGRP_IPV4_ROUTE|unix.RTMGRP_IPV6_ROUTE)
	defer unix.Close(events)
	if a.Is4() {
		ip(t, "-4", "addr", "add", addr+"/32", "dev", dev)
	} else {
		ip(t, "-6", "addr", "add", addr+"/128", "dev", dev, "nodad")
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(events, buf, 0)
		if err != nil {
			t.Fatalf("waiting for the local route of %s: %v", addr, err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Header.Type == unix.RTM_NEWROUTE && localRouteTo(m, a) {
				return
			}
		}
	}
}

// subscribe opens a netlink socket on the route groups given, its reads
// bounded in time.
func subscribe(t *testing.T, groups uint32) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval((20 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	return fd
}

// localRouteTo reports whether an RTM_NEWROUTE is the local route of a.
func localRouteTo(m syscall.NetlinkMessage, a netip.Addr) bool {
	if len(m.Data) < unix.SizeofRtMsg || m.Data[7] != unix.RTN_LOCAL {
		return false
	}
	attrs, err := syscall.ParseNetlinkRouteAttr(&m)
	if err != nil {
		return false
	}
	for _, at := range attrs {
		if at.Attr.Type == unix.RTA_DST {
			d, ok := netip.AddrFromSlice(at.Value)
			return ok && d == a
		}
	}
	return false
}
