package richsession_test

import (
	"context"
	"errors"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
)

// lockedBuffer is a log written by the kind's goroutines and read by the
// test.
type lockedBuffer = sandboxtest.LockedBuffer

// TestRichIncompatibleWorkerNamesImage: the broker withheld a private tool
// result from a worker without the capabilities (its control answer 409):
// the turn fails, its session is stopped, and the log names the exact
// configured image to rebuild.
func TestRichIncompatibleWorkerNamesImage(t *testing.T) {
	logs := &lockedBuffer{}
	r, ctl := richRigLog(t, time.Hour, richExtra, nil, slog.New(slog.NewTextHandler(logs, nil)))
	must(t, r.setRich("room", "helper"))
	ctl.TurnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		return nil, richsession.ErrWorkerIncompatible
	}
	if _, _, err := richTurn(t, r, "room", "one"); !errors.Is(err, errTurnFailed) {
		t.Fatalf("turn: %v, want errTurnFailed", err)
	}
	image := r.kit.Cfg.Image
	if image == "" || !strings.Contains(logs.String(), "rebuild the worker image") || !strings.Contains(logs.String(), image) {
		t.Fatalf("log does not name the image %q to rebuild:\n%s", image, logs.String())
	}
	r.assertClean(t)
}
