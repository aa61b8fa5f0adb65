package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// brokerDropIn is where an operator's drop-ins for every broker unit live.
const brokerDropIn = "sandbox-broker@.service.d"

// doctorResolver: the broker unit denies link-local addresses in the kernel
// (IPAddressDeny=link-local), so a link-local nameserver (Google Compute
// Engine's 169.254.169.254, an AWS resolver at 169.254.169.253) answers no
// broker unless a drop-in allows that address: a broker could then resolve no
// upstream name. Only some link-local nameservers: a warning (the others
// answer); all of them: a failure.
func doctorResolver(d doctorDeps, add func(name, status, detail, remedy string)) {
	data, err := d.readFile(d.resolvConf)
	if err != nil {
		add("resolver", StatusWarn, "cannot read "+d.resolvConf+" ("+err.Error()+"); brokers resolve upstream names with it", "")
		return
	}
	allowed := brokerAllowed(d)
	var all, blocked []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		all = append(all, f[1])
		a, err := netip.ParseAddr(f[1])
		if err != nil || !a.IsLinkLocalUnicast() || allowed(a.WithZone("")) {
			continue
		}
		blocked = append(blocked, f[1])
	}
	if len(blocked) == 0 {
		add("resolver", StatusOK, fmt.Sprintf("%s: nameservers %s; none is link-local without a drop-in allowing it", d.resolvConf, strings.Join(all, " ")), "")
		return
	}
	status := StatusWarn
	detail := fmt.Sprintf("%s names link-local nameservers %s, which the broker unit denies (IPAddressDeny=link-local); brokers use the others",
		d.resolvConf, strings.Join(blocked, " "))
	if len(blocked) == len(all) {
		status = StatusFail
		detail = fmt.Sprintf("%s names only link-local nameservers (%s), which the broker unit denies (IPAddressDeny=link-local): brokers can resolve no upstream name",
			d.resolvConf, strings.Join(blocked, " "))
	}
	add("resolver", status, detail, fmt.Sprintf("write /etc/systemd/system/%s/resolver.conf with \"[Service]\" and \"IPAddressAllow=%s\", then systemctl daemon-reload (see sandbox-broker(8)); or resolve through systemd-resolved (127.0.0.53)",
		brokerDropIn, strings.Join(blocked, " ")))
}

// brokerAllowed reads IPAddressAllow= from the broker units' drop-ins in
// every unit directory and reports whether it lets a through.
func brokerAllowed(d doctorDeps) func(netip.Addr) bool {
	var entries []string
	for _, dir := range d.unitDirs {
		des, err := d.readDir(filepath.Join(dir, brokerDropIn))
		if err != nil {
			continue
		}
		for _, de := range des {
			if !strings.HasSuffix(de.Name(), ".conf") {
				continue
			}
			data, err := d.readFile(filepath.Join(dir, brokerDropIn, de.Name()))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "IPAddressAllow="); ok {
					entries = append(entries, strings.Fields(v)...)
				}
			}
		}
	}
	return func(a netip.Addr) bool {
		for _, e := range entries {
			switch e {
			case "any", "link-local":
				return true
			}
			if p, err := netip.ParsePrefix(e); err == nil && p.Contains(a) {
				return true
			}
			if b, err := netip.ParseAddr(e); err == nil && b == a {
				return true
			}
		}
		return false
	}
}
