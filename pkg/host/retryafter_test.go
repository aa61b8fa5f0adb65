package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// TestEvery429HasRetryAfter: each refusal the host answers with 429 (runs,
// turns, delegations, prechecks) carries Retry-After, in whole seconds,
// from the bound that refused; no other status does.
func TestEvery429HasRetryAfter(t *testing.T) {
	r := newRig(t, "queue:\n  maxWaitSeconds: 45\n", nil)
	t.Cleanup(r.h.Shutdown)
	cases := []struct {
		name   string
		err    error
		status int
		want   string
	}{
		{"runs in flight", runs.Busyf("too many unfinished runs (at most 8, runs.maxInFlight)"), 429, "10"},
		{"finished runs held", runs.BusyRetryf(36*time.Second+time.Millisecond, "held (runs.maxRetainedBytes)"), 429, "37"},
		{"finished runs held, under a second", runs.BusyRetryf(time.Millisecond, "held"), 429, "1"},
		{"turn: channel queue full", ErrQueueFull, 429, "45"},
		{"turn: no slot within queue.maxWaitSeconds", fmt.Errorf("turn: %w", ErrBusy), 429, "45"},
		{"delegations running", fmt.Errorf("2 running: %w", delegation.ErrBusy), 429, "10"},
		{"prechecks running", precheckrun.ErrBusy, 429, "10"},
		{"not a 429", runs.ErrNotFound, 404, ""},
		{"internal", errors.New("x"), 500, ""},
	}
	for _, tc := range cases {
		w := httptest.NewRecorder()
		r.h.fail(w, tc.err)
		if got := w.Header().Get("Retry-After"); w.Code != tc.status || got != tc.want {
			t.Errorf("%s: %d Retry-After %q, want %d %q", tc.name, w.Code, got, tc.status, tc.want)
		}
	}
}

// TestRunsInFlight429RetryAfter: the runs.maxInFlight refusal through the
// API carries Retry-After (runs.BusyRetryAfter).
func TestRunsInFlight429RetryAfter(t *testing.T) {
	release := make(chan struct{})
	sent := make(chan struct{}, 4)
	r, _ := newRunRig(t, runsExtra+"  maxInFlight: 1\n  maxInFlightPerClient: 1\n", bigSupervise(sent, release))
	t.Cleanup(func() { close(release) })
	req := func() *httptest.ResponseRecorder {
		rq := httptest.NewRequest("POST", "/v1/runs", bytes.NewReader(mustJSON(t, runs.Params{Command: "x"})))
		rq = rq.WithContext(context.WithValue(rq.Context(), peerKey{}, Peer{Known: true, UID: clientUID, GID: clientUID}))
		w := httptest.NewRecorder()
		r.h.Handler().ServeHTTP(w, rq)
		return w
	}
	first := req()
	if first.Code != http.StatusAccepted {
		t.Fatalf("first run: %d %s", first.Code, first.Body)
	}
	w := req()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "10" {
		t.Errorf("second run: %d Retry-After %q, want 429 and 10", w.Code, w.Header().Get("Retry-After"))
	}
}

// The refusal while finished runs are held (runs.maxRetainedBytes) is
// tested beside its kind: pkg/coderun's TestRunsRefusedWhileResultsHeld
// checks its hint; "finished runs held" above, the header made of it.

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return b
}
