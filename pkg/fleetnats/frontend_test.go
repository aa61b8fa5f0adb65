package fleetnats

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// TestFrontendUnderItsPermissions: a frontend logs in with its own nkey
// (fleet.server.frontends), runs turns (publish, the reply) without a
// single refusal, and is refused what only a box may do: the channels
// bucket, the workspaces, the jobs queue, presence, approvals.
func TestFrontendUnderItsPermissions(t *testing.T) {
	p := newPKI(t)
	pubA, seedA := newUser(t, p.dir, "box-a")
	pubF, seedF := newUser(t, p.dir, "frontend-1")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pubA})
	f.Server.Frontends = []config.FleetBox{{Name: "frontend-1", NKey: pubF}}
	startServer(t, &f, p.files)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	g := f
	g.NkeySeedFile = seedA
	nca, err := Connect(g)
	if err != nil {
		t.Fatal(err)
	}
	defer nca.Close()
	fa, err := fleet.Open(ctx, nca, fleet.Layout{Partitions: 4, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := fleet.NewBox(fa, fleet.BoxOptions{Name: "box-a", Executor: &fleet.StubExecutor{Duration: 10 * time.Millisecond}, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()

	errs := asyncErrs(make(chan error, 64))
	g.NkeySeedFile = seedF
	ncf, err := Connect(g, errs.option())
	if err != nil {
		t.Fatalf("the frontend's login: %v", err)
	}
	defer ncf.Close()
	ff, err := fleet.BindFrontend(ctx, ncf, 4)
	if err != nil {
		t.Fatalf("bind as a frontend: %v", err)
	}
	for i := 0; i < 2; i++ {
		tn := fleet.Turn{ID: ids.NewTurnID(), Channel: "chan-fe", Speaker: fleet.Speaker{ID: "u1"}, Text: "hi", DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()}
		rep, _, err := ff.Ask(ctx, tn)
		if err != nil || !rep.OK {
			t.Fatalf("the frontend's turn: %+v, %v", rep, err)
		}
	}
	for n := len(errs); n > 0; n-- {
		if err := <-errs; errorIsViolation(err) {
			t.Errorf("a frontend's turn was refused: %v", err)
		}
	}

	js, _ := jetstream.New(ncf)
	for _, tc := range []struct {
		name, subject string
		do            func(ctx context.Context) error
	}{
		{"the channels bucket", "$JS.API.STREAM.INFO.KV_" + BucketChannels, func(ctx context.Context) error { _, err := js.KeyValue(ctx, BucketChannels); return err }},
		{"the workspaces", "$JS.API.STREAM.INFO.OBJ_" + ObjectWorkspaces, func(ctx context.Context) error { _, err := js.ObjectStore(ctx, ObjectWorkspaces); return err }},
		{"a reply's write", "$KV." + BucketReplies + ".x", func(context.Context) error { return ncf.Publish("$KV."+BucketReplies+".x", []byte("forged")) }},
		{"a job", "sandbox.jobs.run", func(context.Context) error { return ncf.Publish("sandbox.jobs.run", []byte("{}")) }},
		{"an approval's question", "sandbox.approvals.run.x", func(context.Context) error { return ncf.Publish("sandbox.approvals.run.x", nil) }},
		{"the family's subjects", "sandbox.>", func(context.Context) error { _, err := ncf.Subscribe("sandbox.>", func(*nats.Msg) {}); return err }},
		{"purge the turns", "$JS.API.STREAM.PURGE." + StreamTurns, func(ctx context.Context) error {
			_, err := ncf.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+StreamTurns, nil)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			defer ccancel()
			err := tc.do(cctx)
			if strings.HasPrefix(tc.subject, "$JS.API") && err == nil {
				t.Errorf("the API call succeeded")
			}
			errs.waitViolation(t, tc.subject)
		})
	}
}
