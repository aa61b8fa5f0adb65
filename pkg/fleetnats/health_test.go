package fleetnats

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

func findings(fs []Finding) map[string]Finding {
	m := map[string]Finding{}
	for _, f := range fs {
		m[f.Name] = f
	}
	return m
}

// TestHealth against a real server: streams missing, then present with
// the wrong replicas, then right; the box's permissions; a server that is
// not there; an unlisted key.
func TestHealth(t *testing.T) {
	p := newPKI(t)
	pub, seed := newUser(t, p.dir, "box-a")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pub})
	f.NkeySeedFile = seed
	startServer(t, &f, p.files)
	ctx := context.Background()

	got := findings(Health(ctx, f))
	if c := got["fleet"]; c.Status != StatusOK || !strings.Contains(c.Detail, "over TLS") {
		t.Errorf("fleet: %+v", c)
	}
	if c := got["fleet-permissions"]; c.Status != StatusOK {
		t.Errorf("permissions: %+v", c)
	}
	if c := got["stream "+StreamTurns]; c.Status != StatusFail || !strings.Contains(c.Detail, StreamTurns+" is missing") {
		t.Errorf("missing stream: %+v", c)
	}

	nc, err := Connect(f)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, s := range Streams {
		if _, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: s, Subjects: []string{"sandbox." + strings.ToLower(s) + ".>"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range KVBuckets {
		if _, err := js.CreateKeyValue(cctx, jetstream.KeyValueConfig{Bucket: b}); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range ObjectStores {
		if _, err := js.CreateObjectStore(cctx, jetstream.ObjectStoreConfig{Bucket: o}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range Health(ctx, f) {
		if c.Status != StatusOK {
			t.Errorf("all present: %+v", c)
		}
	}
	f3 := f
	f3.Replicas = 3
	if c := findings(Health(ctx, f3))["stream KV_"+BucketReplies]; c.Status != StatusFail || !strings.Contains(c.Detail, "has 1 replicas, fleet.replicas is 3") {
		t.Errorf("wrong replicas: %+v", c)
	}

	stranger := f
	_, stranger.NkeySeedFile = newUser(t, p.dir, "stranger")
	if c := findings(Health(ctx, stranger))["fleet"]; c.Status != StatusFail || !strings.Contains(c.Remedy, "fleet.server.boxes") {
		t.Errorf("unlisted key: %+v", c)
	}
	gone := f
	gone.URL = "tls://127.0.0.1:1"
	if c := findings(Health(ctx, gone))["fleet"]; c.Status != StatusFail || !strings.Contains(c.Detail, "tls://127.0.0.1:1") || !strings.Contains(c.Remedy, "sandbox-nats.service") {
		t.Errorf("no server: %+v", c)
	}
}

// TestConnectRemedy: each way a connection fails gets the remedy that fixes
// it (an unreadable key as a user: sudo; a stranger's key: the boxes list).
func TestConnectRemedy(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("fleet.tls.cert and fleet.tls.key: %w: %w", fs.ErrPermission, ErrClient), "sudo sandbox-host doctor"},
		{fmt.Errorf("fleet.tls.ca: %w: %w", fs.ErrNotExist, ErrClient), "fix the file named"},
		{fmt.Errorf("connect: %w", nats.ErrAuthorization), "fleet.server.boxes"},
		{fmt.Errorf("tls: failed to verify certificate: x509: certificate signed by unknown authority"), "fleet.tls.ca must be the CA"},
		{nats.ErrNoServers, "systemctl enable --now sandbox-nats.service"},
	} {
		if got := connectRemedy(tc.err); !strings.Contains(got, tc.want) {
			t.Errorf("%v: remedy %q, want %q", tc.err, got, tc.want)
		}
	}
}
