package fleet

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
)

// TestEnsureJobResources: Ensure makes the jobs' streams and buckets (pkg/fleetjobs works over them), reads
// the result and control buckets from the leader, and refuses an existing
// events stream of another shape, naming it, without changing it.
func TestEnsureJobResources(t *testing.T) {
	c := fleettest.Start(t, 1)
	js, _ := jetstream.New(c.Connect("x"))
	ctx := context.Background()
	if err := Ensure(ctx, js, Layout{Partitions: 1, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{JobResultsBucket, JobControlBucket} {
		s, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Errorf("%s answers direct gets (a lagging replica could answer)", b)
		}
	}
	ev, err := js.Stream(ctx, JobEventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := ev.CachedInfo().Config; cfg.MaxMsgSize != MaxJobFrameBytes || cfg.MaxMsgs != jobEventsMaxMsgs || cfg.MaxBytes > 0 || cfg.MaxAge != jobEventsMaxAge {
		t.Errorf("events stream bounds: %d per frame, %d frames, %d bytes reserved, %s", cfg.MaxMsgSize, cfg.MaxMsgs, cfg.MaxBytes, cfg.MaxAge)
	}

	c2 := fleettest.Start(t, 1)
	js2, _ := jetstream.New(c2.Connect("y"))
	other := jetstream.StreamConfig{Name: JobEventsStream, Subjects: []string{"sandbox.jobevents.>"}, Retention: jetstream.WorkQueuePolicy}
	if _, err := js2.CreateStream(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(ctx, js2, Layout{Partitions: 1, Replicas: 1}); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), JobEventsStream) {
		t.Fatalf("Ensure over another events stream: %v, want ErrMismatch naming it", err)
	}
	s, err := js2.Stream(ctx, JobEventsStream)
	if err != nil || s.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
		t.Fatalf("the existing stream was changed: %v", err)
	}
}
