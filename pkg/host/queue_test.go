package host

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Through the host: two channels run at once, neither overlaps itself.
func TestNoOverlapWithinChannelWhileChannelsRunTogether(t *testing.T) {
	r := newRig(t, "", nil)
	gate := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-gate
		time.Sleep(5 * time.Millisecond)
		return okRun(ctx, spec, stdin)
	}
	var wg sync.WaitGroup
	for _, ch := range []string{"a", "b"} {
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rel, err := r.h.queue.Acquire(context.Background(), ch)
				if err != nil {
					t.Error(err)
					return
				}
				defer rel()
				if _, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: ch, SpeakerID: "s", Text: "x"}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	waitFor(t, "both channels running", func() bool {
		r.docker.Mu.Lock()
		defer r.docker.Mu.Unlock()
		return r.docker.Total == 2
	})
	close(gate)
	wg.Wait()
	if r.docker.MaxRunning["a"] != 1 || r.docker.MaxRunning["b"] != 1 {
		t.Errorf("max running per channel = %v, want 1 each", r.docker.MaxRunning)
	}
	if r.docker.MaxTotal != 2 {
		t.Errorf("max running together = %d, want 2", r.docker.MaxTotal)
	}
	r.assertClean(t)
}
