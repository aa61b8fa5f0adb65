package config

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"
)

// Fleet configures the fleet (docs/fleet.md): boxes sharing turns
// through NATS JetStream. Off, nothing of it is used and one box is what it
// always was. The client keys (box, url, tls, nkeySeedFile, partitions,
// replicas) are the host's; the server keys are sandbox-nats.service's,
// whose nats-server configuration `sandbox-host fleet config` generates.
type Fleet struct {
	Enabled bool `mapstructure:"enabled"`
	// Box is this box's name: its NATS user, its server_name and its
	// consumer-group member name.
	Box string `mapstructure:"box"`
	// URL is the NATS cluster the host connects to: one or more tls://
	// host:port, comma-separated. The default is this box's sandbox-nats.
	URL          string      `mapstructure:"url"`
	Partitions   int         `mapstructure:"partitions"`
	Replicas     int         `mapstructure:"replicas"`
	TLS          FleetTLS    `mapstructure:"tls"`
	NkeySeedFile string      `mapstructure:"nkeySeedFile"`
	Server       FleetServer `mapstructure:"server"`
}

// FleetTLS is this box's TLS material: the fleet's CA, and the box's
// certificate and key, presented both by its sandbox-nats (server and
// route) and by its host (client certificate).
type FleetTLS struct {
	CA   string `mapstructure:"ca"`
	Cert string `mapstructure:"cert"`
	Key  string `mapstructure:"key"`
}

// FleetServer configures this box's sandbox-nats.
type FleetServer struct {
	Listen        string   `mapstructure:"listen"`
	ClusterListen string   `mapstructure:"clusterListen"`
	Routes        []string `mapstructure:"routes"`
	StoreDir      string   `mapstructure:"storeDir"`
	// EncryptionKeyFile holds the JetStream encryption-at-rest key.
	EncryptionKeyFile string `mapstructure:"encryptionKeyFile"`
	// Boxes are the NATS users of the boxes allowed in.
	Boxes []FleetBox `mapstructure:"boxes"`
	// Frontends are the NATS users of frontends that live on no box
	// (pkg/client's DialFleet): each may only publish turns and read
	// replies (fleetnats.FrontendPermissions), never a box's powers.
	Frontends []FleetBox `mapstructure:"frontends"`
}

// FleetBox is one box allowed into the fleet: its name and the public
// user nkey (U...) of its seed file.
type FleetBox struct {
	Name string `mapstructure:"name"`
	NKey string `mapstructure:"nkey"`
}

// Defaults and bounds of the fleet keys. The files default to
// FleetDir, where docs/fleet.md (Install on each box) has the operator
// put them.
const (
	FleetDir              = "/etc/roundtable-sandbox/fleet"
	DefaultFleetURL       = "tls://127.0.0.1:4222"
	DefaultFleetStoreDir  = "/var/lib/sandbox-nats"
	DefaultFleetListen    = "127.0.0.1:4222"
	DefaultClusterListen  = "0.0.0.0:6222"
	DefaultFleetParts     = 16
	DefaultFleetReplicas  = 3
	MaxFleetPartitions    = 1024
	MaxFleetBoxes         = 256
	MaxFleetRoutes        = 256
	MaxFleetBoxNameLength = 63
)

func fleetDefaults() map[string]any {
	return map[string]any{
		"fleet.enabled":                  false,
		"fleet.box":                      "",
		"fleet.url":                      DefaultFleetURL,
		"fleet.partitions":               DefaultFleetParts,
		"fleet.replicas":                 DefaultFleetReplicas,
		"fleet.tls.ca":                   FleetDir + "/ca.pem",
		"fleet.tls.cert":                 FleetDir + "/box.pem",
		"fleet.tls.key":                  FleetDir + "/box.key",
		"fleet.nkeySeedFile":             FleetDir + "/box.nkey",
		"fleet.server.listen":            DefaultFleetListen,
		"fleet.server.clusterListen":     DefaultClusterListen,
		"fleet.server.routes":            []string{},
		"fleet.server.storeDir":          DefaultFleetStoreDir,
		"fleet.server.encryptionKeyFile": FleetDir + "/jetstream.key",
		"fleet.server.boxes":             []any{},
		"fleet.server.frontends":         []any{},
	}
}

// boxNameRe: a NATS server_name, user name and consumer name alike (no
// dots, wildcards or spaces), and a DNS label.
var boxNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidBoxName reports whether name may name a box.
func ValidBoxName(name string) bool { return boxNameRe.MatchString(name) }

// FleetURLs splits fleet.url into its URLs.
func (f Fleet) FleetURLs() []string {
	var out []string
	for _, u := range strings.Split(f.URL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

func (c *Config) validateFleet(bad func(key, format string, a ...any)) {
	f := c.Fleet
	if f.Box != "" && !ValidBoxName(f.Box) {
		bad("fleet.box", "%q must match %s (a DNS label: it is the box's NATS user and server name)", f.Box, boxNameRe)
	} else if f.Enabled && f.Box == "" {
		bad("fleet.box", "is required when fleet.enabled is true: name this box (unique in the fleet)")
	}
	urls := f.FleetURLs()
	if len(urls) == 0 {
		bad("fleet.url", "must name at least one tls://host:port")
	}
	for _, u := range urls {
		if err := checkTLSURL(u); err != nil {
			bad("fleet.url", "%q: %v", u, err)
		}
	}
	if f.Partitions < 1 || f.Partitions > MaxFleetPartitions {
		bad("fleet.partitions", "must be 1 to %d, got %d", MaxFleetPartitions, f.Partitions)
	}
	// Raft wants a majority: an even count tolerates no more failures than
	// the odd one below it (the engine refuses it too).
	if f.Replicas != 1 && f.Replicas != 3 && f.Replicas != 5 {
		bad("fleet.replicas", "must be 1, 3 or 5 (an even count survives no more failures than the odd one below it), got %d", f.Replicas)
	}
	for _, p := range []struct{ key, p string }{
		{"fleet.tls.ca", f.TLS.CA}, {"fleet.tls.cert", f.TLS.Cert}, {"fleet.tls.key", f.TLS.Key},
		{"fleet.nkeySeedFile", f.NkeySeedFile}, {"fleet.server.encryptionKeyFile", f.Server.EncryptionKeyFile},
		{"fleet.server.storeDir", f.Server.StoreDir},
	} {
		if !filepath.IsAbs(p.p) || filepath.Clean(p.p) != p.p || p.p == "/" {
			bad(p.key, "%q must be a clean absolute path other than /", p.p)
		}
	}
	s := f.Server
	for _, l := range []struct{ key, v string }{{"fleet.server.listen", s.Listen}, {"fleet.server.clusterListen", s.ClusterListen}} {
		if err := checkHostPort(l.v); err != nil {
			bad(l.key, "%q: %v", l.v, err)
		}
	}
	if len(s.Routes) > MaxFleetRoutes {
		bad("fleet.server.routes", "at most %d routes", MaxFleetRoutes)
	}
	for i, r := range s.Routes {
		if err := checkTLSURL(r); err != nil {
			bad(fmt.Sprintf("fleet.server.routes[%d]", i), "%q: %v", r, err)
		}
	}
	if len(s.Boxes) > MaxFleetBoxes {
		bad("fleet.server.boxes", "at most %d boxes", MaxFleetBoxes)
	}
	names, keys := map[string]bool{}, map[string]bool{}
	for i, b := range s.Boxes {
		key := fmt.Sprintf("fleet.server.boxes[%d]", i)
		switch {
		case !ValidBoxName(b.Name):
			bad(key+".name", "%q must match %s", b.Name, boxNameRe)
		case names[b.Name]:
			bad(key+".name", "%q is listed twice", b.Name)
		}
		names[b.Name] = true
		switch {
		case !nkeys.IsValidPublicUserKey(b.NKey):
			// Never echo the value: a seed pasted here by mistake is a secret.
			bad(key+".nkey", "must be a public user nkey (56 characters starting with U, as `sandbox-host fleet nkey` prints); never the seed")
		case keys[b.NKey]:
			bad(key+".nkey", "is also another box's key: each box has its own")
		}
		keys[b.NKey] = true
	}
	if len(s.Frontends) > MaxFleetBoxes {
		bad("fleet.server.frontends", "at most %d frontends", MaxFleetBoxes)
	}
	for i, b := range s.Frontends {
		key := fmt.Sprintf("fleet.server.frontends[%d]", i)
		switch {
		case !ValidBoxName(b.Name):
			bad(key+".name", "%q must match %s", b.Name, boxNameRe)
		case names[b.Name]:
			bad(key+".name", "%q is listed twice (box and frontend names are one namespace)", b.Name)
		}
		names[b.Name] = true
		switch {
		case !nkeys.IsValidPublicUserKey(b.NKey):
			bad(key+".nkey", "must be a public user nkey (56 characters starting with U, as `sandbox-host fleet nkey` prints); never the seed")
		case keys[b.NKey]:
			bad(key+".nkey", "is also another box's or frontend's key: each has its own")
		}
		keys[b.NKey] = true
	}
	if f.Enabled && len(s.Boxes) > 0 && f.Box != "" && !slices.ContainsFunc(s.Boxes, func(b FleetBox) bool { return b.Name == f.Box }) {
		bad("fleet.server.boxes", "does not list fleet.box %q: this box's host could not log in to its own server", f.Box)
	}
}

// checkTLSURL accepts tls://host:port and nothing else: every fleet
// connection is TLS, and credentials never sit in a URL.
func checkTLSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL")
	}
	if u.Scheme != "tls" {
		return fmt.Errorf("must be tls://host:port (every fleet connection uses TLS)")
	}
	if u.User != nil {
		return fmt.Errorf("must carry no user or password (the box logs in with fleet.nkeySeedFile)")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("must be tls://host:port with no path or query")
	}
	return checkHostPort(u.Host)
}

func checkHostPort(hp string) error {
	h, p, err := net.SplitHostPort(hp)
	if err != nil || h == "" {
		return fmt.Errorf("must be host:port")
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port must be 1 to 65535")
	}
	return nil
}
