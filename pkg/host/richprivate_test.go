package host

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
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

// The control client maps the broker's 409 (a private result withheld
// from an incompatible worker) to richsession.ErrWorkerIncompatible, and only 409.
func TestRichControlIncompatibleStatus(t *testing.T) {
	for _, c := range []struct {
		code int
		want bool
	}{{http.StatusConflict, true}, {http.StatusServiceUnavailable, false}, {http.StatusBadGateway, false}} {
		sock := filepath.Join(t.TempDir(), "b.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.code)
			io.WriteString(w, `{"error":"worker incompatible"}`)
		})}
		go srv.Serve(ln)
		_, err = richsession.HTTPControl{}.Turn(context.Background(), sock, policy.Bind{}, nil)
		srv.Close()
		if got := errors.Is(err, richsession.ErrWorkerIncompatible); got != c.want || err == nil {
			t.Errorf("status %d: err %v, want incompatible %v", c.code, err, c.want)
		}
	}
}
