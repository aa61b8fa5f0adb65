package fleet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
)

// BenchmarkTurnSteps is fleetbench's overhead series in process: one
// channel, one turn at a time, asked of a box on a 3-server cluster (R3)
// whose servers sync every write as the fleet's do, with a stub turn
// (StubExecutor: it appends to the channel's workspace) of stepsRun. It
// reports p50 and p99 of the engine's overhead (publication to commit
// minus the run) and of each step (Event.Steps).
//
//	go test ./pkg/fleet/ -run '^$' -bench TurnSteps -benchtime 200x
func BenchmarkTurnSteps(b *testing.B) {
	const stepsRun = 20 * time.Millisecond
	c := fleettest.Start(b, 3, fleettest.SyncAlways())
	ctx := context.Background()
	l := Layout{Partitions: 4, Replicas: 3}
	fb, err := Open(ctx, c.Connect("box"), l)
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var committed []Event
	box, err := NewBox(fb, BoxOptions{Name: "box", Logger: quiet, Executor: &StubExecutor{Duration: stepsRun},
		OnEvent: func(e Event) {
			if e.Kind == EventCommitted {
				mu.Lock()
				committed = append(committed, e)
				mu.Unlock()
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	if err := box.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer box.Stop()
	client, err := Open(ctx, c.Connect("client"), l)
	if err != nil {
		b.Fatal(err)
	}
	// The first turns create the channel's keys and the box's consumers:
	// not measured.
	for i := 0; i < 5; i++ {
		if _, _, err := client.Ask(ctx, newTurn("steps", "x")); err != nil {
			b.Fatal(err)
		}
	}
	mu.Lock()
	committed = nil
	mu.Unlock()
	asked := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, _, err := client.Ask(ctx, newTurn("steps", "x")); err != nil {
			b.Fatal(err)
		}
		asked = append(asked, time.Since(start))
	}
	b.StopTimer()
	box.Stop() // every commit's event is in
	mu.Lock()
	defer mu.Unlock()
	series := map[string][]time.Duration{"ask": asked}
	for _, e := range committed {
		s := e.Steps
		series["overhead"] = append(series["overhead"], e.Took-s.Run)
		for name, d := range map[string]time.Duration{"delivered": s.Delivered, "read": s.Read, "claim": s.Claim, "upload": s.Upload,
			"commit": s.Commit, "reply": s.Reply, "ack": s.Ack,
			"rest": e.Took - s.Delivered - s.Read - s.Claim - s.Run - s.Upload - s.Commit - s.Reply - s.Ack} {
			series[name] = append(series[name], d)
		}
	}
	for _, name := range []string{"overhead", "delivered", "read", "claim", "upload", "commit", "reply", "ack", "rest", "ask"} {
		ds := series[name]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
	b.Log(fmt.Sprintf("%d commits measured", len(committed)))
}
