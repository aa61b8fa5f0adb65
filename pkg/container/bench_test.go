package container

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkDriverTurn measures one trivial turn's container through the
// driver: create, attach+start, run (worker output until exit), remove.
// It reports the median of each phase over b.N iterations (use
// -benchtime=20x). Needs SANDBOX_IT_DOCKER; on a daemon without journald set
// SANDBOX_IT_LOG_DRIVER=none. A measurement, never an assertion.
//
//	SANDBOX_IT_DOCKER=unix:///run/docker-dev.sock SANDBOX_IT_LOG_DRIVER=none \
//	  go test -run '^$' -bench DriverTurn -benchtime 20x ./pkg/container/
func BenchmarkDriverTurn(b *testing.B) {
	d := itDriver(b)
	ctx := context.Background()
	var create, attachs, starts, attachStart, run, remove, total []time.Duration
	var attach, start time.Duration
	d.Observe = func(phase string, took time.Duration) {
		switch phase {
		case PhaseAttach:
			attach = took
		case PhaseStart:
			start = took
		}
	}
	// One untimed warm-up: the first create of a fresh daemon is slow.
	benchOnce(b, d, ctx)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		spec := itSpec(b, "it-bench")
		t0 := time.Now()
		id, err := d.Create(ctx, spec)
		if err != nil {
			b.Fatalf("Create: %v", err)
		}
		t1 := time.Now()
		res, err := d.Run(ctx, id, []byte(`{"ok":true,"text":"hi"}`), 1<<10)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("Run = %+v, %v", res, err)
		}
		t2 := time.Now()
		if err := d.Remove(ctx, id); err != nil {
			b.Fatalf("Remove: %v", err)
		}
		t3 := time.Now()
		create = append(create, t1.Sub(t0))
		attachs = append(attachs, attach)
		starts = append(starts, start)
		attachStart = append(attachStart, attach+start)
		run = append(run, t2.Sub(t1)-attach-start)
		remove = append(remove, t3.Sub(t2))
		total = append(total, t3.Sub(t0))
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		v    []time.Duration
	}{{"create", create}, {"attach", attachs}, {"start", starts}, {"attach+start", attachStart}, {"run", run}, {"remove", remove}, {"total", total}} {
		b.ReportMetric(median(m.v), m.name+"-ms")
	}
}

func median(v []time.Duration) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return float64(m) / float64(time.Millisecond)
}

func benchOnce(b *testing.B, d *Driver, ctx context.Context) { //nolint:revive // test helper
	id, err := d.Create(ctx, itSpec(b, "it-bench"))
	if err != nil {
		b.Fatalf("warm-up Create: %v", err)
	}
	if _, err := d.Run(ctx, id, []byte("x"), 1<<10); err != nil {
		b.Fatalf("warm-up Run: %v", err)
	}
	if err := d.Remove(ctx, id); err != nil {
		b.Fatalf("warm-up Remove: %v", err)
	}
}
