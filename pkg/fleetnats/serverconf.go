package fleetnats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// ClusterName is the NATS cluster every box's sandbox-nats joins.
const ClusterName = "roundtable-sandbox"

// TLSFiles are the paths the server reads its TLS material from: the
// configured fleet.tls.* when printed for an operator, the private copies
// in its runtime directory when sandbox-nats.service starts.
type TLSFiles struct {
	CA, Cert, Key string
}

// ErrServerConfig is the category of a fleet configuration a server cannot
// run from.
var ErrServerConfig = errors.New("cannot generate the sandbox-nats configuration")

// CheckServer refuses what config.Validate lets through for a box that
// only connects but a box running sandbox-nats cannot serve: a server
// without a name, without users, or with more replicas than it has peers
// to hold them.
func CheckServer(f config.Fleet) error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: %w", key, fmt.Sprintf(format, a...), ErrServerConfig))
	}
	if !f.Enabled {
		bad("fleet.enabled", "is false: sandbox-nats serves only a box of a fleet (set fleet.enabled: true, or leave sandbox-nats.service disabled)")
	}
	if f.Box == "" {
		bad("fleet.box", "is required: it is this server's server_name")
	}
	if len(f.Server.Boxes) == 0 {
		bad("fleet.server.boxes", "lists no box: the server would let nobody in")
	}
	if len(f.Server.Routes) == 0 && f.Replicas > 1 {
		bad("fleet.replicas", "is %d but fleet.server.routes is empty: a cluster of one holds one replica (set fleet.replicas: 1 or list the routes)", f.Replicas)
	}
	return errors.Join(errs...)
}

// ServerConfig is the nats-server configuration of this box's sandbox-nats
// (JSON, which the nats-server configuration format accepts). It holds no
// secret: the encryption key is given to sandbox-nats apart
// (--encryption-key-file), the TLS key by path.
//
// Clients must use TLS (no allow_non_tls), present a certificate the
// fleet's CA signed and log in with a listed nkey: a stolen seed alone
// does not let anyone in. Routes are mutual TLS against the same CA. (A
// box's key thus also admits a route; the host that reads it already has
// Docker, which is root on its box: a box is trusted whole, docs/fleet.md.)
func ServerConfig(f config.Fleet, files TLSFiles) ([]byte, error) {
	if err := CheckServer(f); err != nil {
		return nil, err
	}
	tlsBlock := func(verify bool) map[string]any {
		return map[string]any{
			"ca_file": files.CA, "cert_file": files.Cert, "key_file": files.Key,
			"verify": verify, "timeout": 5, "min_version": "1.2",
		}
	}
	perms := BoxPermissions()
	users := make([]any, 0, len(f.Server.Boxes)+len(f.Server.Frontends))
	for _, b := range f.Server.Boxes {
		users = append(users, map[string]any{
			"nkey": b.NKey,
			"permissions": map[string]any{
				"publish":   map[string]any{"allow": perms.Publish},
				"subscribe": map[string]any{"allow": perms.Subscribe},
				// Answers to the family's own requests on sandbox.>
				// (one reply each, within a minute).
				"allow_responses": map[string]any{"max": 1, "expires": "1m"},
			},
		})
	}
	// A frontend answers no request: no allow_responses.
	fe := FrontendPermissions()
	for _, b := range f.Server.Frontends {
		users = append(users, map[string]any{
			"nkey": b.NKey,
			"permissions": map[string]any{
				"publish":   map[string]any{"allow": fe.Publish},
				"subscribe": map[string]any{"allow": fe.Subscribe},
			},
		})
	}
	conf := map[string]any{
		"server_name":   f.Box,
		"listen":        f.Server.Listen,
		"tls":           tlsBlock(true),
		"authorization": map[string]any{"users": users, "timeout": 5},
		"jetstream": map[string]any{
			"store_dir": f.Server.StoreDir,
			// Jepsen (2.12.1) lost acknowledged writes under the default
			// fsync interval: every write is synced before its ack.
			"sync_interval": "always",
			// Encryption at rest; the key comes from
			// fleet.server.encryptionKeyFile through sandbox-nats.
			"cipher":           "aes",
			"max_memory_store": 256 << 20,
		},
		// A peer or client behind a cut link answers nothing and closes
		// nothing: pings every 3 s, 3 unanswered close it (the default is
		// every 2 minutes, 2 unanswered). pkg/fleet's clients ping the
		// same way.
		"ping_interval": "3s",
		"ping_max":      3,
		// The journal stamps each line.
		"logtime": false,
		// Nothing of a guest's text is traced or logged.
		"trace": false, "debug": false,
	}
	if len(f.Server.Routes) > 0 {
		routes := make([]string, 0, len(f.Server.Routes))
		for _, r := range f.Server.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("fleet.server.routes: %q is not a URL: %w", r, ErrServerConfig)
			}
			routes = append(routes, "nats-route://"+u.Host)
		}
		conf["cluster"] = map[string]any{
			"name":   ClusterName,
			"listen": f.Server.ClusterListen,
			"routes": routes,
			"tls":    tlsBlock(true),
			// Clients keep to the fleet.url they were given: the other
			// boxes' client ports listen on their own loopback.
			"no_advertise": true,
			// A route to a server behind a cut link stays open and its
			// writes block: with the defaults (pings every 30 s, 2
			// unanswered; a blocked write retried, the route kept) the
			// majority's own replication stalled on it for most of a minute
			// and no channel committed. Pings every 3 s (3 unanswered, see
			// ping_max), and a write blocked for 5 s closes the route (it is
			// dialled again at once).
			"ping_interval":  "3s",
			"write_deadline": "5s",
			"write_timeout":  "close",
		}
	}
	// The nats-server parser knows no \u escapes: '>' must stay itself.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(conf); err != nil {
		return nil, err
	}
	if bytes.Contains(out.Bytes(), []byte(`\u`)) {
		return nil, fmt.Errorf("a fleet.* value holds a control or non-ASCII character the nats-server parser cannot read: %w", ErrServerConfig)
	}
	return out.Bytes(), nil
}
