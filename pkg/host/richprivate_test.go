package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRichIncompatibleWorkerNamesImage: the broker withheld a private tool
// result from a worker without the capabilities (its control answer 409):
// the turn fails, its session is stopped, and the log names the exact
// configured image to rebuild.
func TestRichIncompatibleWorkerNamesImage(t *testing.T) {
	logs := &lockedBuffer{}
	ctl := &fakeRichControl{}
	r := newRig(t, richExtra, func(o *Options) {
		richTuning(o).Control = ctl
		richTuning(o).Idle = time.Hour
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		if !spec.Rich {
			return okRun(ctx, spec, stdin)
		}
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	t.Cleanup(r.h.Shutdown)
	must(t, r.h.state.SetRich("room", "helper"))
	ctl.turnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		return nil, richsession.ErrWorkerIncompatible
	}
	if _, _, err := richTurn(t, r, "room", "one"); !errors.Is(err, ErrTurnFailed) {
		t.Fatalf("turn: %v, want ErrTurnFailed", err)
	}
	image := r.h.cfg.Image
	if image == "" || !strings.Contains(logs.String(), "rebuild the worker image") || !strings.Contains(logs.String(), image) {
		t.Fatalf("log does not name the image %q to rebuild:\n%s", image, logs.String())
	}
	r.assertClean(t)
}
