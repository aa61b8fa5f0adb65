package broker

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// BenchmarkGrantBindRevoke: the host's cost of giving an exec its network
// and taking it back (two control round trips over the broker socket),
// with no traffic and with one CONNECT tunnel open across the revoke.
func BenchmarkGrantBindRevoke(b *testing.B) {
	for _, tunnel := range []bool{false, true} {
		b.Run(fmt.Sprintf("tunnel=%v", tunnel), func(b *testing.B) {
			g := newGrantHarness(b, os.Getuid())
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				exec := fmt.Sprintf("exec-%d", i)
				if _, err := g.ctl.Bind(ctx, g.grant(exec)); err != nil {
					b.Fatal(err)
				}
				if tunnel {
					b.StopTimer()
					gc := g.dialGuest()
					if code := gc.connect(g.echo); code != 200 {
						b.Fatalf("CONNECT: %d", code)
					}
					b.StartTimer()
				}
				if _, err := g.ctl.Revoke(ctx, exec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
