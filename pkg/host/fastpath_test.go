package host

import (
	"context"
	"encoding/json"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// The cold path's stdin gate tests are pkg/sealedturn's
// (stdingate_test.go); here the host's answer before the cleanup.

var index = sandboxtest.Index

// blockRemoval makes every Remove wait until the returned func is called;
// entered counts the Remove calls that started.
func blockRemoval(r *rig) (entered func() int, unblock func()) {
	var mu sync.Mutex
	n := 0
	ch := make(chan struct{})
	r.docker.RemoveHook = func(string) {
		mu.Lock()
		n++
		mu.Unlock()
		<-ch
	}
	var once sync.Once
	return func() int { mu.Lock(); defer mu.Unlock(); return n }, func() { once.Do(func() { close(ch) }) }
}

type answer struct {
	status int
	body   string
	err    error
}

func postTurn(hc *http.Client, channel string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		resp, err := hc.Post("http://host/v1/channels/"+channel+"/turns", "application/json", strings.NewReader(`{"speaker":{"id":"s"},"text":"x"}`))
		if err != nil {
			out <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		out <- answer{status: resp.StatusCode, body: string(data), err: err}
	}()
	return out
}

func wait(t *testing.T, what string, c <-chan answer) answer {
	t.Helper()
	select {
	case a := <-c:
		return a
	case <-time.After(5 * time.Second):
		t.Fatalf("no answer: %s", what)
		return answer{}
	}
}

func noAnswer(t *testing.T, what string, c <-chan answer) {
	t.Helper()
	select {
	case a := <-c:
		t.Fatalf("%s: answered %d %q before cleanup finished", what, a.status, a.body)
	case <-time.After(100 * time.Millisecond):
	}
}

// A successful turn is answered (whole body) while its container removal is
// still blocked; the channel's next turn starts only after that cleanup;
// the answered turn can no longer be cancelled.
func TestReplyBeforeCleanupKeepsTheSlot(t *testing.T) {
	r := newRig(t, "", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	entered, unblock := blockRemoval(r)
	defer unblock()
	hc, _ := serve(t, r)

	first := wait(t, "first turn while its removal is blocked", postTurn(hc, "c"))
	var resp apiwire.Reply
	if first.err != nil || first.status != 200 || json.Unmarshal([]byte(first.body), &resp) != nil || !resp.OK || resp.Text != "hello" {
		t.Fatalf("first = %d %q %v; want 200 with the reply", first.status, first.body, first.err)
	}
	waitFor(t, "the first removal to start", func() bool { return entered() == 1 })
	if n := len(r.docker.Removes); n != 0 {
		t.Fatalf("%d removals finished, want 0 (blocked)", n)
	}
	if st := r.h.status("c"); st.RunningTurn != resp.TurnID {
		t.Errorf("running turn = %q, want %q (still cleaning up)", st.RunningTurn, resp.TurnID)
	}
	if status, body := call(t, hc, "POST", "/v1/channels/c/cancel", ""); status != 200 || body["cancelled"] != false {
		t.Errorf("cancel of an answered turn = %d %v, want cancelled false", status, body)
	}

	second := postTurn(hc, "c")
	waitFor(t, "the second turn to queue", func() bool { return r.h.queue.WaitingFor("c") == 1 })
	noAnswer(t, "second turn", second)
	if n := len(r.docker.EventList()); index(r.docker.EventList(), "create", 1) >= 0 {
		t.Fatalf("second container created before the first cleanup ended (%d events)", n)
	}
	unblock()
	if a := wait(t, "second turn", second); a.status != 200 {
		t.Fatalf("second = %d %q %v", a.status, a.body, a.err)
	}
	ev := r.docker.EventList()
	if removed, created := index(ev, "removed", 0), index(ev, "create", 1); removed < 0 || created < removed {
		t.Errorf("events = %v, want the second create after the first removal", ev)
	}
	waitFor(t, "the second cleanup", func() bool { return r.h.status("c").RunningTurn == "" })
	r.assertClean(t)
}

// Shutdown waits for the cleanup of a turn already answered.
func TestShutdownWaitsForCleanupAfterReply(t *testing.T) {
	r := newRig(t, "", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	entered, unblock := blockRemoval(r)
	defer unblock()
	hc, _ := serve(t, r)
	if a := wait(t, "turn", postTurn(hc, "c")); a.status != 200 {
		t.Fatalf("turn = %d %q %v", a.status, a.body, a.err)
	}
	waitFor(t, "the removal to start", func() bool { return entered() == 1 })
	stopped := make(chan struct{})
	go func() { r.h.Shutdown(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Shutdown returned while a turn's cleanup was still running")
	case <-time.After(100 * time.Millisecond):
	}
	unblock()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the cleanup finished")
	}
	r.assertClean(t)
}

// A cleanup failure after the early answer is still logged and counted.
func TestCleanupFailureAfterReplyIsCounted(t *testing.T) {
	r := newRig(t, "", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	r.docker.RemoveFails = -1
	hc, _ := serve(t, r)
	if a := wait(t, "turn", postTurn(hc, "c")); a.status != 200 || !strings.Contains(a.body, `"ok":true`) {
		t.Fatalf("turn = %d %q %v; want the reply (cleanup comes after it)", a.status, a.body, a.err)
	}
	waitFor(t, "the turn to end", func() bool { return r.h.status("c").RunningTurn == "" })
	if got := counterValue(r.h.metrics.cleanupFailures.WithLabelValues("sealedturn", "container")); got != 1 {
		t.Errorf("sandbox_cleanup_failures_total{kind=sealedturn,stage=container} = %v, want 1", got)
	}
	if got := counterValue(r.h.metrics.turns.WithLabelValues(resultCleanup)); got != 1 {
		t.Errorf("turns with result %s = %v, want 1", resultCleanup, got)
	}
}

// Failed turns are still answered only after their cleanup.
func TestFailedTurnAnsweredAfterCleanup(t *testing.T) {
	r := newRig(t, "", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	r.docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) {
		return RunResult{Stdout: []byte("not a reply")}, nil
	}
	entered, unblock := blockRemoval(r)
	defer unblock()
	hc, _ := serve(t, r)
	a := postTurn(hc, "c")
	waitFor(t, "the removal to start", func() bool { return entered() == 1 })
	noAnswer(t, "failed turn", a)
	unblock()
	if got := wait(t, "failed turn", a); got.status != 500 || strings.Contains(got.body, "not a reply") {
		t.Errorf("failed turn = %d %q, want a generic 500", got.status, got.body)
	}
}
