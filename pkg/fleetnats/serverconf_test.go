package fleetnats

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// TestServerConfigRefusals: what a box that only connects may leave unset
// but a server cannot run without, each naming its key.
func TestServerConfigRefusals(t *testing.T) {
	ok := config.Fleet{Enabled: true, Box: "a", Replicas: 1, Server: config.FleetServer{Boxes: []config.FleetBox{{Name: "a", NKey: "U"}}}}
	for _, tc := range []struct {
		name   string
		change func(*config.Fleet)
		want   string
	}{
		{"fleet off", func(f *config.Fleet) { f.Enabled = false }, "fleet.enabled: is false"},
		{"no name", func(f *config.Fleet) { f.Box = "" }, "fleet.box: is required"},
		{"no users", func(f *config.Fleet) { f.Server.Boxes = nil }, "fleet.server.boxes: lists no box"},
		{"R3 alone", func(f *config.Fleet) { f.Replicas = 3 }, "fleet.replicas: is 3 but fleet.server.routes is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			tc.change(&f)
			_, err := ServerConfig(f, TLSFiles{})
			if !errors.Is(err, ErrServerConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := ServerConfig(ok, TLSFiles{}); err != nil {
		t.Errorf("valid: %v", err)
	}
}

// TestServerConfigShape: TLS on both ports (routes mutual), every write
// synced, the store encrypted, one user per box with the box permissions.
func TestServerConfigShape(t *testing.T) {
	f := config.Fleet{Enabled: true, Box: "a", Replicas: 3, Server: config.FleetServer{
		Listen: "127.0.0.1:4222", ClusterListen: "0.0.0.0:6222", StoreDir: "/var/lib/sandbox-nats",
		Routes: []string{"tls://10.0.0.1:6222", "tls://10.0.0.2:6222"},
		Boxes:  []config.FleetBox{{Name: "a", NKey: "UA"}, {Name: "b", NKey: "UB"}},
	}}
	out, err := ServerConfig(f, TLSFiles{CA: "/c", Cert: "/p", Key: "/k"})
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		ServerName string `json:"server_name"`
		TLS        struct {
			CA     string `json:"ca_file"`
			Verify bool   `json:"verify"`
		} `json:"tls"`
		AllowNonTLS *bool  `json:"allow_non_tls"`
		Ping        string `json:"ping_interval"`
		PingMax     int    `json:"ping_max"`
		Auth        struct {
			Users []struct {
				NKey  string `json:"nkey"`
				Perms struct {
					Pub struct{ Allow []string } `json:"publish"`
					Sub struct{ Allow []string } `json:"subscribe"`
				} `json:"permissions"`
			} `json:"users"`
		} `json:"authorization"`
		JS struct {
			Sync   string `json:"sync_interval"`
			Cipher string `json:"cipher"`
			Store  string `json:"store_dir"`
		} `json:"jetstream"`
		Cluster struct {
			Routes []string `json:"routes"`
			Ping   string   `json:"ping_interval"`
			WDL    string   `json:"write_deadline"`
			WTO    string   `json:"write_timeout"`
			TLS    struct {
				Verify bool `json:"verify"`
			} `json:"tls"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), `\u`) {
		t.Errorf("escapes the nats parser cannot read: %s", out)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"server_name", c.ServerName, "a"},
		{"client tls ca", c.TLS.CA, "/c"},
		{"client tls verify", c.TLS.Verify, true},
		{"allow_non_tls", c.AllowNonTLS == nil, true},
		{"route tls verify", c.Cluster.TLS.Verify, true},
		{"routes", strings.Join(c.Cluster.Routes, ","), "nats-route://10.0.0.1:6222,nats-route://10.0.0.2:6222"},
		{"sync_interval", c.JS.Sync, "always"},
		// A dead peer behind a cut link is dropped within about 12 s.
		{"ping_interval", c.Ping, "3s"},
		{"ping_max", c.PingMax, 3},
		{"route ping_interval", c.Cluster.Ping, "3s"},
		{"route write_deadline", c.Cluster.WDL, "5s"},
		{"route write_timeout", c.Cluster.WTO, "close"},
		{"cipher", c.JS.Cipher, "aes"},
		{"store_dir", c.JS.Store, "/var/lib/sandbox-nats"},
		{"users", len(c.Auth.Users), 2},
		{"user b", c.Auth.Users[1].NKey, "UB"},
		{"publish allow", strings.Join(c.Auth.Users[1].Perms.Pub.Allow, " "), strings.Join(BoxPermissions().Publish, " ")},
		{"subscribe allow", strings.Join(c.Auth.Users[0].Perms.Sub.Allow, " "), "sandbox.> _INBOX.>"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}
