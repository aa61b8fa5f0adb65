package fleet

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
)

// BenchmarkEngineOverhead measures the engine alone: Ask (publish, take,
// claim, commit, reply, ack, the reply watch) with an executor that
// returns at once, one turn at a time, on one server (R1) and on three
// (R3). It reports p50 and p99 of the whole round trip.
func BenchmarkEngineOverhead(b *testing.B) {
	for _, servers := range []int{1, 3} {
		b.Run(fmt.Sprintf("R%d", servers), func(b *testing.B) {
			benchOverhead(b, servers)
		})
	}
}

func benchOverhead(b *testing.B, servers int) {
	c := fleettest.Start(b, servers)
	ctx := context.Background()
	l := Layout{Partitions: 4, Replicas: servers}
	fb, err := Open(ctx, c.Connect("box"), l)
	if err != nil {
		b.Fatal(err)
	}
	box, err := NewBox(fb, BoxOptions{Name: "box", Logger: quiet, Executor: ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
		return Output{OK: true, Text: "ok"}, nil
	})})
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
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := newTurn(fmt.Sprintf("chan-%d", i%8), "x")
		start := time.Now()
		if _, _, err := client.Ask(ctx, t); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkThroughput runs stub turns (fleet.StubTurn each) of 64 channels
// on 1 and 2 boxes sharing 16 partitions (Peers), on a 3-server cluster,
// and reports committed turns per second.
func BenchmarkThroughput(b *testing.B) {
	for _, boxes := range []int{1, 2} {
		b.Run(fmt.Sprintf("boxes=%d", boxes), func(b *testing.B) {
			c := fleettest.Start(b, 3)
			ctx := context.Background()
			l := Layout{Partitions: 16, Replicas: 3}
			var peers []string
			for i := 0; i < boxes; i++ {
				peers = append(peers, fmt.Sprintf("box%d", i))
			}
			for _, name := range peers {
				f, err := Open(ctx, c.Connect(name), l)
				if err != nil {
					b.Fatal(err)
				}
				box, err := NewBox(f, BoxOptions{Name: name, Logger: quiet, Peers: peers, StandbyDelay: time.Hour, Executor: &StubExecutor{}})
				if err != nil {
					b.Fatal(err)
				}
				if err := box.Start(ctx); err != nil {
					b.Fatal(err)
				}
				defer box.Stop()
			}
			client, err := Open(ctx, c.Connect("client"), l)
			if err != nil {
				b.Fatal(err)
			}
			n := max(b.N, 64)
			turns := make([]Turn, n)
			b.ResetTimer()
			start := time.Now()
			for i := range turns {
				turns[i] = newTurn(fmt.Sprintf("chan-%d", i%64), "x")
				if _, err := client.Submit(ctx, turns[i]); err != nil {
					b.Fatal(err)
				}
			}
			for _, t := range turns {
				if _, err := client.AwaitReply(ctx, t.ID); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "turns/s")
		})
	}
}
