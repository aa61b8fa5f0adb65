package rich

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

// fakeBroker serves the pull routes, a scripted SSE model, /tools, /mcp
// and /compact on a Unix socket, recording what it received.
type fakeBroker struct {
	lastReady richproto.Ready // the last /worker/ready body
	t         testing.TB
	path      string

	mu           sync.Mutex
	srv          *http.Server
	readies      int
	turns        chan *richproto.Turn
	results      chan richproto.Result
	resultStatus int
	script       []string // SSE bodies, one per model call; "BREAK:" prefix: cut after it
	requests     []Request
	toolBodies   map[string][]json.RawMessage
	toolAnswer   func(route string, body json.RawMessage) (int, string)
	compact      func(req *CompactRequest) (int, string)
	compactReqs  []CompactRequest
	reports      []CompactReport
	headers      []http.Header
}

func newFakeBroker(t testing.TB) *fakeBroker {
	t.Helper()
	dir, err := os.MkdirTemp("", "rich")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeBroker{t: t, path: filepath.Join(dir, "b.sock"), turns: make(chan *richproto.Turn, 4),
		results: make(chan richproto.Result, 4), toolBodies: map[string][]json.RawMessage{}}
	f.start()
	t.Cleanup(f.stop)
	return f
}

func (f *fakeBroker) start() {
	ln, err := net.Listen("unix", f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(f.serve), ErrorLog: nil}
	f.mu.Lock()
	f.srv = srv
	f.readies = 0
	f.mu.Unlock()
	go srv.Serve(ln)
}

// stop closes the listener and every connection (a broker restart).
func (f *fakeBroker) stop() {
	f.mu.Lock()
	srv := f.srv
	f.mu.Unlock()
	srv.Close()
	os.Remove(f.path)
}

func (f *fakeBroker) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	switch {
	case r.URL.Path == richproto.RouteReady:
		var rd richproto.Ready
		if json.Unmarshal(body, &rd) != nil {
			w.WriteHeader(400)
			return
		}
		f.mu.Lock()
		f.readies++
		f.lastReady = rd
		f.mu.Unlock()
		w.WriteHeader(204)
	case r.URL.Path == richproto.RouteNext:
		if len(body) > 0 || r.ContentLength != 0 {
			w.WriteHeader(400) // the real broker: next takes no body
			return
		}
		select {
		case turn := <-f.turns:
			json.NewEncoder(w).Encode(turn)
		case <-time.After(100 * time.Millisecond):
			w.WriteHeader(204)
		case <-r.Context().Done():
		}
	case r.URL.Path == richproto.RouteResult:
		var res richproto.Result
		if err := json.Unmarshal(body, &res); err != nil {
			w.WriteHeader(400)
			return
		}
		f.mu.Lock()
		status := f.resultStatus
		f.mu.Unlock()
		if status != 0 {
			w.WriteHeader(status)
		}
		f.results <- res
	case r.URL.Path == RouteMessages:
		var req Request
		if err := json.Unmarshal(body, &req); err != nil || !req.Stream || r.Header.Get("Accept") != "text/event-stream" {
			w.WriteHeader(400)
			return
		}
		f.mu.Lock()
		f.requests = append(f.requests, req)
		if len(f.script) == 0 {
			f.mu.Unlock()
			w.WriteHeader(500)
			return
		}
		sse := f.script[0]
		f.script = f.script[1:]
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if cut, ok := strings.CutPrefix(sse, "BREAK:"); ok {
			io.WriteString(w, cut)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		// Event by event, flushed, as a streaming broker sends them.
		for _, ev := range strings.SplitAfter(sse, "\n\n") {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	case r.URL.Path == RouteCompact:
		var req CompactRequest
		json.Unmarshal(body, &req)
		f.mu.Lock()
		f.compactReqs = append(f.compactReqs, req)
		fn := f.compact
		f.mu.Unlock()
		status, answer := 200, `{"fallback":"undefined"}`
		if fn != nil {
			status, answer = fn(&req)
		}
		w.WriteHeader(status)
		io.WriteString(w, answer)
	case r.URL.Path == RouteCompactReport:
		var rep CompactReport
		json.Unmarshal(body, &rep)
		f.mu.Lock()
		f.reports = append(f.reports, rep)
		f.mu.Unlock()
		w.WriteHeader(204)
	case strings.HasPrefix(r.URL.Path, "/tools/") || strings.HasPrefix(r.URL.Path, "/mcp/"):
		f.mu.Lock()
		f.toolBodies[r.URL.Path] = append(f.toolBodies[r.URL.Path], json.RawMessage(body))
		fn := f.toolAnswer
		f.mu.Unlock()
		status, answer := 200, `{"result":{"ok":true}}`
		if fn != nil {
			status, answer = fn(r.URL.Path, body)
		}
		w.WriteHeader(status)
		io.WriteString(w, answer)
	default:
		w.WriteHeader(404)
	}
}

func (f *fakeBroker) setScript(s ...string) {
	f.mu.Lock()
	f.script = append(f.script, s...)
	f.mu.Unlock()
}

func (f *fakeBroker) modelRequests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

// firstHeaders is the first request's headers (the worker keeps polling:
// read under the lock).
func (f *fakeBroker) firstHeaders() http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.headers) == 0 {
		return http.Header{}
	}
	return f.headers[0].Clone()
}

func (f *fakeBroker) readyCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readies
}

// SSE builders in the provider's shape.
func event(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

func start(input int) string {
	return event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":%d,"output_tokens":1}}}`, input))
}

func stop(reason string, out int) string {
	return event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q},"usage":{"output_tokens":%d}}`, reason, out)) +
		event("message_stop", `{"type":"message_stop"}`)
}

func textBlock(i int, text string) string {
	half := len(text) / 2
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, i)) +
		event("ping", `{"type":"ping"}`) +
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, i, q(text[:half]))) +
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, i, q(text[half:]))) +
		event("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i))
}

func thinkingBlock(i int, text, sig string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"thinking","thinking":""}}`, i)) +
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"thinking_delta","thinking":%s}}`, i, q(text))) +
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"signature_delta","signature":%s}}`, i, q(sig))) +
		event("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i))
}

func toolBlock(i int, id, name, input string) string {
	half := len(input) / 2
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, i, id, name)) +
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, q(input[:half]))) +
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, q(input[half:]))) +
		event("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i))
}

func textAnswer(text string) string { return start(10) + textBlock(0, text) + stop("end_turn", 5) }

func toolAnswer(id, name, input string) string {
	return start(10) + toolBlock(0, id, name, input) + stop("tool_use", 5)
}

// fakeStore is an in-memory session store with pkg/sessions' context rules.
type fakeStore struct {
	mu      sync.Mutex
	entries []Entry
	corrupt bool
	opens   int
	fresh   int
	n       int
	failAt  int // Append number that fails (0: none)
	appends int
}

func (s *fakeStore) Open(fresh bool) (Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opens++
	if fresh {
		s.fresh++
	}
	if s.corrupt {
		return nil, errors.New("sessions: line 3: not a valid entry: session file corrupt")
	}
	return &fakeSession{s: s}, nil
}

func (s *fakeStore) snapshot() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.entries...)
}

type fakeSession struct{ s *fakeStore }

func (f *fakeSession) Append(e Entry) (Entry, error) {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appends++
	if s.failAt != 0 && s.appends == s.failAt {
		return e, errors.New("sessions: write: no space left on device")
	}
	if e.ID == "" {
		s.n++
		e.ID = fmt.Sprintf("e%d", s.n)
	}
	e.Timestamp = "2026-11-30T00:00:00Z"
	s.entries = append(s.entries, e)
	return e, nil
}

func (f *fakeSession) Context() (c SessionContext) {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	last := -1
	for i, e := range s.entries {
		if e.Type == TypeCompaction {
			last = i
		}
	}
	// Reader records are left out of the messages, as pkg/sessions does
	// (which also maps messages to them: the real sessions' tests cover it).
	defer func() {
		msgs := c.Messages[:0:0]
		for _, e := range c.Messages {
			if e.Type != sessions.TypeReaders {
				msgs = append(msgs, e)
			}
		}
		c.Messages = msgs
	}()
	if last == -1 {
		c.Messages = append(c.Messages, s.entries...)
		return c
	}
	comp := s.entries[last]
	c.Compaction = &comp
	c.Summary = comp.Compaction.Summary
	keep := false
	for _, e := range s.entries[:last] {
		if e.ID == comp.Compaction.FirstKeptEntryID {
			keep = true
		}
		if keep && e.Type != TypeCompaction {
			c.Messages = append(c.Messages, e)
		}
	}
	c.Kept = len(c.Messages)
	c.Messages = append(c.Messages, s.entries[last+1:]...)
	return c
}

func (f *fakeSession) Close() error { return nil }

// harness runs a worker against a fake broker and store.
type harness struct {
	t      testing.TB
	broker *fakeBroker
	store  *fakeStore
	real   bool // pkg/sessions in the workspace instead of store
	ws     string
	cancel context.CancelFunc
	done   chan error
	logs   *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

func newHarness(t *testing.T, tiers Tiers) *harness {
	h := &harness{t: t, broker: newFakeBroker(t), store: &fakeStore{}, ws: t.TempDir(), logs: &lockedBuffer{}}
	h.startWorker(tiers)
	return h
}

// newRealHarness uses pkg/sessions' JSONL files in the workspace.
func newRealHarness(t *testing.T) *harness {
	h := &harness{t: t, broker: newFakeBroker(t), real: true, ws: t.TempDir(), logs: &lockedBuffer{}}
	h.startWorker(bigTiers)
	return h
}

func (h *harness) startWorker(tiers Tiers) {
	log := slog.New(slog.NewJSONHandler(h.logs, nil))
	b := NewBroker(h.broker.path, log)
	var store Sessions = h.store
	if h.real {
		store = WorkspaceSessions{Workspace: h.ws}
	}
	w, err := New(Options{Pull: b, Model: b, Tools: b, Sessions: store, Compactor: b, Reporter: b, Workspace: h.ws,
		Tiers: tiers, Logger: log, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Now: func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- w.Serve(ctx) }()
	h.t.Cleanup(h.stop)
}

// stopWorker stops the worker as a container restart would.
func (h *harness) stopWorker() {
	h.stop()
	// The stopped worker's poll may still wait in the fake (at most its
	// 100 ms hold): let it end so it cannot take the next turn.
	time.Sleep(150 * time.Millisecond)
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		h.t.Error("worker did not stop")
	}
	h.cancel = nil
}

var turnSeq int

func newTurn(text string) *richproto.Turn {
	turnSeq++
	return &richproto.Turn{ID: fmt.Sprintf("%032x", turnSeq), Text: text, Speaker: richproto.Speaker{ID: "u1", Name: "Ann"},
		Thinking: "off", DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(), Model: "claude-test"}
}

// run hands turn to the worker and waits for its result.
func (h *harness) run(turn *richproto.Turn) richproto.Result {
	h.t.Helper()
	h.broker.turns <- turn
	select {
	case res := <-h.broker.results:
		if res.TurnID != turn.ID {
			h.t.Fatalf("result for turn %s, want %s", res.TurnID, turn.ID)
		}
		return res
	case <-time.After(10 * time.Second):
		h.t.Fatalf("no result; logs:\n%s", h.logs.String())
	}
	return richproto.Result{}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // generous: the unit stage runs packages in parallel on 2 cores
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
