package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDoctorResolver(t *testing.T) {
	cases := []struct {
		name, resolv, dropIn string
		want, in             string
	}{
		{"resolved stub", "nameserver 127.0.0.53\noptions edns0\n", "", StatusOK, "127.0.0.53"},
		{"LAN resolvers", "# from DHCP\nnameserver 192.168.1.1\nnameserver 2001:db8::53\n", "", StatusOK, "none is link-local"},
		{"GCE metadata resolver", "search c.p.internal\nnameserver 169.254.169.254\n", "", StatusFail, "brokers can resolve no upstream name"},
		{"link-local v6 with a zone", "nameserver fe80::1%eth0\n", "", StatusFail, "fe80::1%eth0"},
		{"one of two link-local", "nameserver 169.254.169.253\nnameserver 10.0.0.2\n", "", StatusWarn, "brokers use the others"},
		{"allowed by a drop-in", "nameserver 169.254.169.254\n", "[Service]\nIPAddressAllow=169.254.169.254\n", StatusOK, "169.254.169.254"},
		{"allowed by a prefix", "nameserver 169.254.169.254\n", "[Service]\nIPAddressAllow=10.0.0.0/8 169.254.169.0/24\n", StatusOK, ""},
		{"allowed by link-local", "nameserver fe80::1%eth0\n", "[Service]\nIPAddressAllow=link-local\n", StatusOK, ""},
		{"a drop-in for another address", "nameserver 169.254.169.254\n", "[Service]\nIPAddressAllow=169.254.169.253\n", StatusFail, "IPAddressAllow=169.254.169.254"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := realDoctorDeps()
			d.resolvConf = filepath.Join(dir, "resolv.conf")
			d.unitDirs = []string{filepath.Join(dir, "none"), filepath.Join(dir, "etc")}
			os.WriteFile(d.resolvConf, []byte(tc.resolv), 0o644)
			if tc.dropIn != "" {
				os.MkdirAll(filepath.Join(dir, "etc", brokerDropIn), 0o755)
				os.WriteFile(filepath.Join(dir, "etc", brokerDropIn, "resolver.conf"), []byte(tc.dropIn), 0o644)
			}
			var got []Check
			doctorResolver(d, func(name, status, detail, remedy string) {
				got = append(got, Check{Name: name, Status: status, Detail: detail, Remedy: remedy})
			})
			if len(got) != 1 || got[0].Name != "resolver" || got[0].Status != tc.want ||
				!strings.Contains(got[0].Detail+" "+got[0].Remedy, tc.in) {
				t.Fatalf("got %+v, want one resolver check %s containing %q", got, tc.want, tc.in)
			}
			if tc.want != StatusOK && !strings.Contains(got[0].Remedy, brokerDropIn+"/resolver.conf") {
				t.Errorf("remedy %q names no drop-in", got[0].Remedy)
			}
		})
	}
	d := realDoctorDeps()
	d.resolvConf = filepath.Join(t.TempDir(), "missing")
	doctorResolver(d, func(name, status, detail, _ string) {
		if status != StatusWarn || !strings.Contains(detail, "cannot read") {
			t.Errorf("missing resolv.conf: %s %s", status, detail)
		}
	})
}
