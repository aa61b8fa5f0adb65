package host

import (
	"strings"
	"testing"
)

// TestHeldChannelRefusesWith503: a turn whose container removal failed
// after its reply (200) holds its channel: the channel's next turn is
// refused with 503 naming the channel and what clears it, counted as
// channel_held, and the failure stays counted; once the removal works
// again (the reaper removed it) the channel's next turn is answered.
func TestHeldChannelRefusesWith503(t *testing.T) {
	r := newRig(t, "", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	r.docker.Mu.Lock()
	r.docker.RemoveFails = -1
	r.docker.Mu.Unlock()
	hc, _ := serve(t, r)
	if a := wait(t, "first turn", postTurn(hc, "c")); a.status != 200 || !strings.Contains(a.body, `"ok":true`) {
		t.Fatalf("first = %d %q %v; want the reply", a.status, a.body, a.err)
	}
	waitFor(t, "the first turn to end", func() bool { return r.h.status("c").RunningTurn == "" })
	a := wait(t, "second turn", postTurn(hc, "c"))
	if a.status != 503 || !strings.Contains(a.body, `channel \"c\" is held`) || !strings.Contains(a.body, "sandbox-reaper") || strings.Contains(a.body, "fake: removal failed") {
		t.Fatalf("second = %d %q; want 503 naming the held channel, without the cleanup's error", a.status, a.body)
	}
	if got := counterValue(r.h.metrics.turns.WithLabelValues(resultHeld)); got != 1 {
		t.Errorf("turns with result %s = %v, want 1", resultHeld, got)
	}
	if got := counterValue(r.h.metrics.cleanupFailures.WithLabelValues("sealedturn", "container")); got < 2 {
		t.Errorf("container cleanup failures = %v, want the failure and its failed retry", got)
	}
	r.docker.Mu.Lock()
	r.docker.RemoveFails = 0
	r.docker.Mu.Unlock()
	if a := wait(t, "third turn", postTurn(hc, "c")); a.status != 200 {
		t.Fatalf("third = %d %q %v; want the reply once the retried cleanup succeeded", a.status, a.body, a.err)
	}
	waitFor(t, "the third turn to end", func() bool { return r.h.status("c").RunningTurn == "" })
	r.assertClean(t)
}
