package fleetnats

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats/serve"
)

const testKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// startServer runs sandbox-nats's server in process from the configuration
// generated for f (serve.Options and serve.Start, as cmd/sandbox-nats
// does), and returns it with f.URL pointing at its client port.
func startServer(t *testing.T, f *config.Fleet, files TLSFiles) *server.Server {
	t.Helper()
	conf, err := ServerConfig(*f, files)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	confPath, keyPath := filepath.Join(dir, "nats.conf"), filepath.Join(dir, "jetstream.key")
	if err := os.WriteFile(confPath, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := serve.Options(confPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoSigs, opts.NoLog = true, true
	s, err := serve.Start(opts, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	f.URL = "tls://" + s.Addr().String()
	return s
}

// asyncErrs collects a connection's asynchronous errors (permission
// violations arrive so).
type asyncErrs chan error

func (a asyncErrs) option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case a <- err:
		default:
		}
	})
}

// waitViolation waits for the server's permission violation naming subject.
func (a asyncErrs) waitViolation(t *testing.T, subject string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-a:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-deadline:
			t.Fatalf("no permissions violation for %q within 10 s", subject)
		}
	}
}

// TestBoxDoesFamilyOperations: a listed box, over TLS with its nkey, does
// what the engine does: the turns stream with de-duplicated publishes and a
// pinned consumer, create-only replies and compare-and-swap state in KV,
// workspaces in the object store, the consumer groups' bucket.
func TestBoxDoesFamilyOperations(t *testing.T) {
	p := newPKI(t)
	pub, seed := newUser(t, p.dir, "box-a")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pub})
	f.NkeySeedFile = seed
	startServer(t, &f, p.files)
	nc, err := Connect(f)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamTurns, Subjects: []string{"sandbox.turns.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create %s: %v", StreamTurns, err)
	}
	for i := 0; i < 2; i++ { // the second is a resubmission: de-duplicated
		ack, err := js.Publish(ctx, "sandbox.turns.3", []byte("turn"), jetstream.WithMsgID("turn-1"))
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		if ack.Duplicate != (i == 1) {
			t.Errorf("publish %d: duplicate %v", i, ack.Duplicate)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, StreamTurns, jetstream.ConsumerConfig{
		Durable: "turns-box-a", AckPolicy: jetstream.AckExplicitPolicy,
		PriorityGroups: []string{"turns"}, PriorityPolicy: jetstream.PriorityPolicyPinned, PinnedTTL: time.Minute,
	})
	if err != nil {
		t.Fatalf("pinned consumer: %v", err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup("turns"))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	n := 0
	for m := range batch.Messages() {
		n++
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if n != 1 || batch.Error() != nil {
		t.Fatalf("fetched %d messages, error %v", n, batch.Error())
	}
	stream, err := js.Stream(ctx, StreamTurns)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.UnpinConsumer(ctx, "turns-box-a", "turns"); err != nil {
		t.Errorf("unpin: %v", err)
	}

	replies, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketReplies, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("create KV %s: %v", BucketReplies, err)
	}
	if _, err := replies.Create(ctx, "turn-1", []byte("reply")); err != nil {
		t.Fatalf("kv create: %v", err)
	}
	if _, err := replies.Create(ctx, "turn-1", []byte("again")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("second reply: %v, want ErrKeyExists", err)
	}
	if e, err := replies.Get(ctx, "turn-1"); err != nil || string(e.Value()) != "reply" {
		t.Fatalf("kv get: %v %v", e, err)
	}
	w, err := replies.Watch(ctx, "turn-1")
	if err != nil {
		t.Fatalf("kv watch: %v", err)
	}
	if e := <-w.Updates(); e == nil || string(e.Value()) != "reply" {
		t.Errorf("watch: %v", e)
	}
	_ = w.Stop()
	chans, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketChannels, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("create KV %s: %v", BucketChannels, err)
	}
	rev, err := chans.Put(ctx, "ch", []byte("gen 1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chans.Update(ctx, "ch", []byte("gen 2"), rev); err != nil {
		t.Errorf("fenced update: %v", err)
	}
	if _, err := chans.Update(ctx, "ch", []byte("stale"), rev); err == nil {
		t.Errorf("update on a stale revision succeeded")
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketConsumerGroups, Storage: jetstream.FileStorage}); err != nil {
		t.Errorf("create KV %s: %v", BucketConsumerGroups, err)
	}

	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: ObjectWorkspaces, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("create object store: %v", err)
	}
	if _, err := obs.PutBytes(ctx, "ch/1", []byte("workspace")); err != nil {
		t.Fatalf("object put: %v", err)
	}
	if got, err := obs.GetBytes(ctx, "ch/1"); err != nil || string(got) != "workspace" {
		t.Fatalf("object get: %q %v", got, err)
	}
	if err := obs.Delete(ctx, "ch/1"); err != nil {
		t.Errorf("object delete: %v", err)
	}
	// Encryption at rest: the marker is nowhere in the store in clear.
	const marker = "plaintext-marker-5f3a9c"
	if _, err := chans.Put(ctx, "marker", []byte(marker)); err != nil {
		t.Fatal(err)
	}
	found := 0
	_ = filepath.WalkDir(f.Server.StoreDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			found++
			if data, _ := os.ReadFile(path); strings.Contains(string(data), marker) {
				t.Errorf("%s holds a value in clear: the store is not encrypted", path)
			}
		}
		return nil
	})
	if found == 0 {
		t.Errorf("no file under the store dir %s", f.Server.StoreDir)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamJobs, Subjects: []string{"sandbox.jobs.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Errorf("create %s: %v", StreamJobs, err)
	}
}

// TestBoxRefusedOutsideItsPermissions: the same box may not publish or
// subscribe outside sandbox.>, create or read another stream or bucket, or
// delete a family stream.
func TestBoxRefusedOutsideItsPermissions(t *testing.T) {
	p := newPKI(t)
	pub, seed := newUser(t, p.dir, "box-a")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pub})
	f.NkeySeedFile = seed
	startServer(t, &f, p.files)
	errs := asyncErrs(make(chan error, 64))
	nc, err := Connect(f, errs.option())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamTurns, Subjects: []string{"sandbox.turns.>"}}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, subject string
		do            func(ctx context.Context) error
	}{
		{"publish outside sandbox.>", "other.subject", func(context.Context) error { return nc.Publish("other.subject", []byte("x")) }},
		{"subscribe outside sandbox.>", "other.>", func(context.Context) error { _, err := nc.Subscribe("other.>", func(*nats.Msg) {}); return err }},
		{"create a non-family stream", "$JS.API.STREAM.CREATE.OTHER", func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}})
			return err
		}},
		{"read a non-family stream", "$JS.API.STREAM.INFO.OTHER", func(ctx context.Context) error { _, err := js.Stream(ctx, "OTHER"); return err }},
		{"a non-family bucket", "$JS.API.STREAM.INFO.KV_OTHER", func(ctx context.Context) error { _, err := js.KeyValue(ctx, "OTHER"); return err }},
		{"list every stream", "$JS.API.STREAM.NAMES", func(ctx context.Context) error {
			l := js.StreamNames(ctx)
			for range l.Name() {
			}
			return l.Err()
		}},
		{"delete a family stream", "$JS.API.STREAM.DELETE." + StreamTurns, func(ctx context.Context) error { return js.DeleteStream(ctx, StreamTurns) }},
		// The jobs' stream and buckets (this session's) are no exception.
		{"delete the job events stream", "$JS.API.STREAM.DELETE." + StreamJobEvents, func(ctx context.Context) error { return js.DeleteStream(ctx, StreamJobEvents) }},
		{"delete the job results bucket", "$JS.API.STREAM.DELETE.KV_" + BucketJobResults, func(ctx context.Context) error { return js.DeleteKeyValue(ctx, BucketJobResults) }},
		{"delete the job control bucket", "$JS.API.STREAM.DELETE.KV_" + BucketJobControl, func(ctx context.Context) error { return js.DeleteKeyValue(ctx, BucketJobControl) }},
		{"list every stream's info", "$JS.API.STREAM.LIST", func(ctx context.Context) error {
			l := js.ListStreams(ctx)
			for range l.Info() {
			}
			return l.Err()
		}},
		{"a non-family KV subject", "$KV.OTHER.k", func(context.Context) error { return nc.Publish("$KV.OTHER.k", []byte("x")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// API calls get no answer: each waits at most 1 s.
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			defer ccancel()
			err := tc.do(cctx)
			if strings.HasPrefix(tc.subject, "$JS.API") && err == nil {
				t.Errorf("the API call succeeded")
			}
			errs.waitViolation(t, tc.subject)
		})
	}
	// Still connected and allowed what it was allowed.
	if _, err := js.Publish(ctx, "sandbox.turns.1", []byte("ok")); err != nil {
		t.Errorf("family publish after the refusals: %v", err)
	}
}

// TestUnknownNkeyRefused: a box whose key is not listed cannot log in.
func TestUnknownNkeyRefused(t *testing.T) {
	p := newPKI(t)
	pub, _ := newUser(t, p.dir, "box-a")
	_, stranger := newUser(t, p.dir, "stranger")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pub})
	startServer(t, &f, p.files)
	f.NkeySeedFile = stranger
	nc, err := Connect(f)
	if err == nil {
		nc.Close()
		t.Fatal("an unlisted nkey connected")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("got %v, want an authorization violation", err)
	}
}

// TestClientWithoutCertificateRefused: TLS with the right CA and a listed
// nkey, but no client certificate: the handshake fails before any login.
func TestClientWithoutCertificateRefused(t *testing.T) {
	p := newPKI(t)
	pub, seed := newUser(t, p.dir, "box-a")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pub})
	f.NkeySeedFile = seed
	startServer(t, &f, p.files)
	opts, err := ClientOptions(f)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(p.files.CA)
	pool.AppendCertsFromPEM(ca)
	// Later options win: the same connection without the certificate.
	opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	nc, err := nats.Connect(f.URL, opts...)
	if err == nil {
		nc.Close()
		t.Fatal("connected without a client certificate")
	}
	// With it (the same options otherwise), the box gets in.
	nc, err = Connect(f)
	if err != nil {
		t.Fatalf("with the certificate: %v", err)
	}
	nc.Close()
}

// TestClientWithoutTLSRefused: the client port speaks nothing but TLS; its
// INFO says so and a plain-text CONNECT gets no answer but the connection
// closed, before any login.
func TestClientWithoutTLSRefused(t *testing.T) {
	p := newPKI(t)
	pub, _ := newUser(t, p.dir, "box-a")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pub})
	s := startServer(t, &f, p.files)
	conn, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("INFO %q, %v: want tls_required", info, err)
	}
	fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false}\r\nPING\r\n")
	var lines []string
	var end error
	for end == nil {
		var l string
		l, end = r.ReadString('\n')
		if l != "" {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	// The server expects a TLS handshake: it drops the plain bytes and
	// closes; a timeout would mean it kept a plain-text client.
	var ne net.Error
	if errors.As(end, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the plain-text connection open (%v)", end)
	}
	if got := strings.Join(lines, " | "); strings.Contains(got, "PONG") || strings.Contains(got, "+OK") {
		t.Errorf("server answered %q to a plain-text client", got)
	}
}
