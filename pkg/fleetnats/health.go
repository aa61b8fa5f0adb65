package fleetnats

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// Finding statuses (the doctor's own words).
const (
	StatusOK   = "ok"
	StatusFail = "fail"
	StatusWarn = "warn"
)

// Finding is one fleet check: what was checked, its status, and for a
// failure what is broken and what to do.
type Finding struct {
	Name, Status, Detail, Remedy string
}

// HealthTimeout bounds all of Health's calls together.
const HealthTimeout = 30 * time.Second

// probeOutside is a subject outside every family subject: publishing to it
// must be refused by the server.
const probeOutside = "roundtable-sandbox-doctor.outside"

// probeInside is a family subject no stream holds.
const probeInside = "sandbox.doctor.probe"

// Health checks this box's view of the fleet: the connection (TLS,
// certificate, nkey), JetStream, each family stream and bucket (present,
// fleet.replicas replicas, a leader, every replica current) and this box's
// permissions (family subjects allowed, others refused). Each failure names
// what is broken.
func Health(ctx context.Context, f config.Fleet) []Finding {
	ctx, cancel := context.WithTimeout(ctx, HealthTimeout)
	defer cancel()
	var out []Finding
	add := func(name, status, detail, remedy string) {
		out = append(out, Finding{name, status, detail, remedy})
	}
	// The permission probe's refusal is expected: no default handler
	// printing it.
	nc, err := Connect(f, nats.NoReconnect(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		add("fleet", StatusFail, connectDetail(f, err), connectRemedy(err))
		return out
	}
	defer nc.Close()
	add("fleet", StatusOK, fmt.Sprintf("connected to %s over TLS (server %s) as box %s", nc.ConnectedUrlRedacted(), nc.ConnectedServerName(), f.Box), "")

	js, err := jetstream.New(nc)
	if err != nil {
		add("fleet-jetstream", StatusFail, "JetStream: "+err.Error(), "")
		return out
	}
	ai, err := js.AccountInfo(ctx)
	if err != nil {
		add("fleet-jetstream", StatusFail, "JetStream does not answer: "+err.Error(),
			"journalctl -u sandbox-nats.service on the servers; a cluster answers only while a majority of its servers is up")
		return out
	}
	add("fleet-jetstream", StatusOK, fmt.Sprintf("JetStream answers (%d streams, %d bytes stored)", ai.Streams, ai.Store), "")
	for _, name := range StreamNames() {
		add(streamFinding(ctx, js, name, f.Replicas))
	}
	add(permissionFinding(nc))
	return out
}

func connectDetail(f config.Fleet, err error) string {
	return fmt.Sprintf("cannot connect to fleet.url %s: %v", strings.Join(f.FleetURLs(), ","), err)
}

func connectRemedy(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, fs.ErrPermission):
		return "run `sudo sandbox-host doctor`: the box's key and seed are readable by root and the host's user only"
	case errors.Is(err, ErrClient):
		return "fix the file named (docs/fleet.md, Install on each box: certificates and nkeys)"
	case errors.Is(err, nats.ErrAuthorization):
		return "list this box's public key in fleet.server.boxes on every server (`sandbox-host fleet nkey` printed it) and restart sandbox-nats there"
	case strings.Contains(msg, "x509") || strings.Contains(msg, "certificate") || strings.Contains(msg, "tls:"):
		return "fleet.tls.ca must be the CA that signed every server's and this box's certificate, and fleet.url's host a name or address in the server's certificate"
	case errors.Is(err, nats.ErrNoServers) || strings.Contains(msg, "refused") || strings.Contains(msg, "timeout"):
		return "start the server (systemctl enable --now sandbox-nats.service) or point fleet.url at a running cluster"
	}
	return "journalctl -u sandbox-nats.service on the server named in fleet.url"
}

// streamFinding checks one family stream: present, with the replicas
// fleet.replicas asks, a leader, every replica current.
func streamFinding(ctx context.Context, js jetstream.JetStream, name string, replicas int) (string, string, string, string) {
	check := "stream " + name
	s, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return check, StatusFail, name + " is missing", "sandbox-host creates the family's streams and buckets when it starts in fleet mode: start it on one box (systemctl start sandbox-host.service)"
	case err != nil:
		return check, StatusFail, name + ": " + err.Error(), "journalctl -u sandbox-nats.service; a permissions violation means this box's user lacks the family's permissions (an operator's own cluster: grant them, docs/fleet.md)"
	}
	info := s.CachedInfo()
	if info.Config.Replicas != replicas {
		return check, StatusFail, fmt.Sprintf("%s has %d replicas, fleet.replicas is %d: the engine refuses to run on it", name, info.Config.Replicas, replicas),
			"set fleet.replicas to the streams' replicas on every box, or change the stream's (nats stream edit " + name + " --replicas)"
	}
	cl := info.Cluster
	if cl == nil || cl.Leader == "" {
		return check, StatusFail, name + " has no leader: it accepts no write", "a majority of its replicas' servers must be up and routed to each other (journalctl -u sandbox-nats.service)"
	}
	if placed := len(cl.Replicas) + 1; placed != replicas {
		return check, StatusFail, fmt.Sprintf("%s has %d of its %d replicas placed (leader %s)", name, placed, replicas, cl.Leader), "the cluster needs at least fleet.replicas servers with JetStream up"
	}
	var bad, peers []string
	for _, p := range cl.Replicas {
		peers = append(peers, p.Name)
		switch {
		case p.Offline:
			bad = append(bad, p.Name+" offline")
		case !p.Current:
			bad = append(bad, fmt.Sprintf("%s behind by %d", p.Name, p.Lag))
		}
	}
	sort.Strings(peers)
	if len(bad) > 0 {
		return check, StatusFail, fmt.Sprintf("%s (leader %s): replica %s", name, cl.Leader, strings.Join(bad, ", ")), "bring the named servers back (journalctl -u sandbox-nats.service there); a replica behind catches up by itself"
	}
	detail := fmt.Sprintf("%s: %d replicas, leader %s", name, replicas, cl.Leader)
	if len(peers) > 0 {
		detail += ", " + strings.Join(peers, ", ") + " current"
	}
	return check, StatusOK, detail, ""
}

// permissionFinding: a family subject is accepted and one outside is
// refused. The server answers a refused publish with -ERR before the PONG
// of the flush that follows, and the client records it as LastError
// before the flush returns: no waiting on a timer.
func permissionFinding(nc *nats.Conn) (string, string, string, string) {
	const name = "fleet-permissions"
	if err := nc.Publish(probeInside, nil); err != nil {
		return name, StatusFail, "publish to " + probeInside + ": " + err.Error(), ""
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return name, StatusFail, "flush: " + err.Error(), ""
	}
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		return name, StatusFail, "this box may not publish to the family's subjects (sandbox.>): " + err.Error(),
			"grant this box's user the family's permissions (sandbox-nats does; an operator's own cluster: docs/fleet.md)"
	}
	if err := nc.Publish(probeOutside, nil); err != nil {
		return name, StatusFail, "publish: " + err.Error(), ""
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return name, StatusFail, "flush: " + err.Error(), ""
	}
	if err := nc.LastError(); !errors.Is(err, nats.ErrPermissionViolation) {
		return name, StatusWarn, "this box's user may publish outside sandbox.>: the server grants it more than the family needs",
			"limit each box's user to the family's permissions (sandbox-nats does; docs/fleet.md lists them)"
	}
	return name, StatusOK, "family subjects allowed, others refused", ""
}
