// Package fleet is the fleet on one machine (docs/fleet.md): boxes
// as network namespaces joined by veth pairs to a bridge that lives in a
// namespace of its own, each box with its own nats-server (cmd/sandbox-nats
// from pkg/fleetnats's generated configuration: TLS, nkeys, encryption at
// rest) and a box process (fleetit box: pkg/fleet's Box with stub turns),
// a driver process in one more namespace submitting turns, and the faults
// of issue 28 (kill -9 of a box or of a nats-server, a cut link, a paused
// owner, a full disk) and issue 38 (a partial cut: two boxes cut from each
// other, each still reaching the others).
//
// Guarantee: every address is in 10.251.0.0/24 and exists inside this
// run's namespaces only (the bridge too has its own namespace: the machine's
// own namespace gets no interface, no address, no route). Close removes
// the namespaces, the processes and the store mounts, also after a failure.
//
// Root only: tests skip without root, without `ip netns` or without
// Switch, naming the switch.
package fleet

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Switch names the environment variable that enables the fleet tests ("1").
const Switch = "SANDBOX_IT_FLEET"

// Subnet is the fleet's private range (inside its namespaces only).
const Subnet = "10.251.0"

// Available says why the machine cannot run a fleet ("" when it can).
func Available() string {
	if os.Geteuid() != 0 {
		return "not root (network namespaces need CAP_SYS_ADMIN)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip (iproute2) not found"
	}
	name := fmt.Sprintf("sbxfprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return "cannot make a network namespace: " + strings.TrimSpace(string(out))
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return ""
}

// network is the run's namespaces: a switch with the bridge, one per box,
// one for the driver.
type network struct {
	prefix string
	sw     string
	nss    []string
}

func run(args ...string) error {
	cmd := exec.Command(args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func newNetwork() (*network, error) {
	n := &network{prefix: fmt.Sprintf("sbxf%d", os.Getpid())}
	n.sw = n.prefix + "-sw"
	if err := run("ip", "netns", "add", n.sw); err != nil {
		return nil, err
	}
	n.nss = append(n.nss, n.sw)
	for _, c := range [][]string{
		{"ip", "-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.sw, "link", "set", "br0", "up"},
		{"ip", "-n", n.sw, "link", "set", "lo", "up"},
	} {
		if err := run(c...); err != nil {
			n.close()
			return nil, err
		}
	}
	return n, nil
}

// ns is the namespace of host number i (1..199 boxes, 200 the driver).
func (n *network) ns(i int) string { return fmt.Sprintf("%s-%d", n.prefix, i) }

// addr is host i's address.
func addr(i int) string { return fmt.Sprintf("%s.%d", Subnet, i) }

// veth is the switch side of host i's link.
func veth(i int) string { return fmt.Sprintf("vb%d", i) }

// addHost makes host i's namespace, linked to the bridge, with addr(i).
func (n *network) addHost(i int) error {
	ns := n.ns(i)
	if err := run("ip", "netns", "add", ns); err != nil {
		return err
	}
	n.nss = append(n.nss, ns)
	for _, c := range [][]string{
		{"ip", "-n", n.sw, "link", "add", veth(i), "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "-n", n.sw, "link", "set", veth(i), "master", "br0", "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", addr(i) + "/24", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
	} {
		if err := run(c...); err != nil {
			return err
		}
	}
	return nil
}

// link cuts (up=false) or restores host i's link to the bridge.
func (n *network) link(i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return run("ip", "-n", n.sw, "link", "set", veth(i), state)
}

// cut drops (cut=true) every packet between hosts i and j, both ways, by
// a blackhole route in each one's namespace; both keep the bridge and
// every other host (restored: the routes deleted).
func (n *network) cut(i, j int, cut bool) error {
	op := "del"
	if cut {
		op = "add"
	}
	if err := run("ip", "-n", n.ns(i), "route", op, "blackhole", addr(j)+"/32"); err != nil {
		return err
	}
	return run("ip", "-n", n.ns(j), "route", op, "blackhole", addr(i)+"/32")
}

// close deletes every namespace (their veths go with them).
func (n *network) close() {
	for i := len(n.nss) - 1; i >= 0; i-- {
		_ = run("ip", "netns", "del", n.nss[i])
	}
	n.nss = nil
}
