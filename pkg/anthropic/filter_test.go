package anthropic

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
)

const testSecret = "sk-ant-api03-Q7v9XkLm2PzR8tYwN4bH6cJd1fGs5aE0uIoTyVqWxZ"

// credChecker is the broker's Checker, built the same way.
type credChecker struct {
	m       *credential.Matcher
	secrets []credential.Secret
}

func (c credChecker) Value(v any) bool { return c.m.Reflected(v) }
func (c credChecker) Text() func(string) bool {
	s := credential.NewStream(c.secrets...)
	return s.Reflects
}

var checker = credChecker{credential.NewMatcher(credential.NewSecret(testSecret)), []credential.Secret{credential.NewSecret(testSecret)}}

// frames collects what FilterStream passes.
type frames struct {
	mu  sync.Mutex
	got [][]byte
}

func (f *frames) WriteEvent(p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, append([]byte(nil), p...))
	return nil
}

func (f *frames) all() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(bytes.Join(f.got, nil))
}

func (f *frames) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) == 0 {
		return ""
	}
	return string(f.got[len(f.got)-1])
}

func eventsBody(evs []anthropictest.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(anthropictest.Frame(e))
	}
	return b.String()
}

func run(t *testing.T, body string, o FilterOptions) (*frames, FilterResult, error) {
	t.Helper()
	if o.Checker == nil {
		o.Checker = checker
	}
	var f frames
	res, err := FilterStream(context.Background(), &f, io.NopCloser(strings.NewReader(body)), o)
	return &f, res, err
}

func TestFilterStreamPassesARealShapedStream(t *testing.T) {
	evs := anthropictest.ThinkingToolStream("claude-test", "clock", `{"tz":`, `"UTC"}`)
	body := ": comment\n\n" + eventsBody(evs)
	f, res, err := run(t, body, FilterOptions{})
	if err != nil {
		t.Fatalf("FilterStream: %v", err)
	}
	if res.Events != len(evs) || res.Bytes != int64(len(body)) {
		t.Errorf("result %+v, want %d events and %d bytes", res, len(evs), len(body))
	}
	rd := NewStreamReader(strings.NewReader(f.all()))
	var text, input, thinking, sig strings.Builder
	var stop string
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Delta != nil {
			text.WriteString(ev.Delta.Text)
			input.WriteString(ev.Delta.PartialJSON)
			thinking.WriteString(ev.Delta.Thinking)
			sig.WriteString(ev.Delta.Signature)
			if ev.Delta.StopReason != "" {
				stop = ev.Delta.StopReason
			}
		}
	}
	if text.String() != "I'll check." || input.String() != `{"tz":"UTC"}` || thinking.String() != "Let me think about it." || sig.Len() == 0 || stop != "tool_use" {
		t.Errorf("reassembled text %q input %q thinking %q sig %d stop %q", text.String(), input.String(), thinking.String(), sig.Len(), stop)
	}
}

func TestFilterStreamRefusals(t *testing.T) {
	start := anthropictest.Start("claude-test")
	text := anthropictest.BlockStart(0, `{"type":"text","text":""}`)
	end := anthropictest.End("end_turn")
	b64 := base64.StdEncoding.EncodeToString([]byte(testSecret))
	with := func(evs ...anthropictest.Event) string {
		return eventsBody(append(append([]anthropictest.Event{start}, evs...), end...))
	}
	tests := []struct {
		name string
		body string
		want error
		// leaked must never appear in what the worker got.
		leaked string
	}{
		{"secret whole in a text delta", with(text, anthropictest.TextDelta(0, "key: "+testSecret)), ErrReflected, testSecret[20:40]},
		{"secret split across two text deltas", with(text, anthropictest.TextDelta(0, "key: "+testSecret[:14]), anthropictest.TextDelta(0, testSecret[14:]+" ok")), ErrReflected, testSecret[14:]},
		{"secret one byte a delta", with(append([]anthropictest.Event{text}, func() (e []anthropictest.Event) {
			for i := range testSecret {
				e = append(e, anthropictest.TextDelta(0, testSecret[i:i+1]))
			}
			return
		}()...)...), ErrReflected, ""},
		{"secret base64 split across deltas", with(text, anthropictest.TextDelta(0, b64[:9]), anthropictest.TextDelta(0, b64[9:])), ErrReflected, b64[9:]},
		{"secret in thinking deltas", with(anthropictest.BlockStart(0, `{"type":"thinking","thinking":""}`), anthropictest.ThinkingDelta(0, testSecret[:10]), anthropictest.ThinkingDelta(0, testSecret[10:])), ErrReflected, testSecret[10:]},
		{"secret JSON-escaped across tool input deltas", with(anthropictest.BlockStart(0, `{"type":"tool_use","id":"toolu_1","name":"f","input":{}}`),
			anthropictest.InputDelta(0, `{"k":"\u0073\u006b-ant-api03-Q7v9`), anthropictest.InputDelta(0, `XkLm2PzR8tYwN4bH6cJd1fGs5aE0uIoTyVqWxZ"}`), anthropictest.BlockStop(0)), ErrReflected, `"type":"content_block_stop"`},
		{"secret in message_start", eventsBody([]anthropictest.Event{{Name: "message_start", Data: `{"type":"message_start","message":{"id":"` + testSecret + `"}}`}}), ErrReflected, testSecret},
		{"secret in an unknown event is dropped, stream fine", with(anthropictest.Event{Name: "future_event", Data: `{"x":"` + testSecret + `"}`}), nil, testSecret},
		{"upstream error event", with(text, anthropictest.ErrorEvent("overloaded_error", "secret upstream detail at https://internal")), ErrUpstreamError, "internal"},
		{"error event with unknown type", with(anthropictest.ErrorEvent("permission_error", "detail")), ErrUpstreamError, "permission_error"},
		{"data not JSON", with(anthropictest.Event{Name: "ping", Data: `not json`}), ErrStream, ""},
		{"data duplicate keys", with(anthropictest.Event{Name: "ping", Data: `{"type":"ping","type":"ping"}`}), ErrStream, ""},
		{"type is not the name", with(anthropictest.Event{Name: "ping", Data: `{"type":"message_stop"}`}), ErrStream, ""},
		{"server_tool_use block", with(anthropictest.BlockStart(0, `{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}`)), ErrStream, "web_search"},
		{"web_search_tool_result block", with(anthropictest.BlockStart(0, `{"type":"web_search_tool_result","tool_use_id":"s","content":[]}`)), ErrStream, "web_search"},
		{"delta of another block type", with(text, anthropictest.InputDelta(0, `{}`)), ErrStream, ""},
		{"citations delta", with(text, anthropictest.Delta(0, `{"type":"citations_delta","citation":{}}`)), ErrStream, ""},
		{"delta before its start", with(anthropictest.TextDelta(3, "x")), ErrStream, ""},
		{"block started twice", with(text, text), ErrStream, ""},
		{"stop of unknown block", with(anthropictest.BlockStop(7)), ErrStream, ""},
		{"negative index", with(anthropictest.Event{Name: "content_block_stop", Data: `{"type":"content_block_stop","index":-1}`}), ErrStream, ""},
		{"tool input not JSON", with(anthropictest.BlockStart(0, `{"type":"tool_use","id":"t","name":"f","input":{}}`), anthropictest.InputDelta(0, `{"a":`), anthropictest.BlockStop(0)), ErrStream, ""},
		{"ends before message_stop", eventsBody([]anthropictest.Event{start, text, anthropictest.TextDelta(0, "hi")}), ErrStream, ""},
		{"ends mid-event", eventsBody([]anthropictest.Event{start}) + "event: ping\ndata: {\"type\":", ErrStream, ""},
		{"event over the limit", eventsBody([]anthropictest.Event{start}) + "event: ping\ndata: " + strings.Repeat("a", MaxEventBytes+10) + "\n\n", ErrStream, ""},
		{"line over the limit without newline", "data: " + strings.Repeat("a", MaxEventBytes+100), ErrStream, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _, err := run(t, tt.body, FilterOptions{})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("FilterStream: %v", err)
				}
			} else if !errors.Is(err, tt.want) {
				t.Fatalf("FilterStream error = %v, want %v", err, tt.want)
			}
			got := f.all()
			if tt.leaked != "" && strings.Contains(got, tt.leaked) {
				t.Errorf("the worker got %q", tt.leaked)
			}
			if strings.Contains(got, testSecret) {
				t.Errorf("the worker got the whole secret")
			}
			if tt.want != nil && (!strings.HasPrefix(f.last(), "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":") || !strings.Contains(f.last(), `"message":"upstream `)) {
				t.Errorf("last frame %q, want a generic error event", f.last())
			}
		})
	}
}

func TestFilterStreamUpstreamErrorTypeIsPublicOnlyWhenKnown(t *testing.T) {
	for typ, want := range map[string]string{"overloaded_error": "overloaded_error", "rate_limit_error": "rate_limit_error", "invalid_request_error": "api_error", "x": "api_error"} {
		f, _, _ := run(t, eventsBody([]anthropictest.Event{anthropictest.ErrorEvent(typ, "m")}), FilterOptions{})
		if !strings.Contains(f.last(), `"type":"`+want+`"`) || strings.Contains(f.last(), `"m"`) {
			t.Errorf("upstream %s: worker got %q, want type %s and the broker's message", typ, f.last(), want)
		}
	}
}

func TestFilterStreamSplitAcrossReadChunks(t *testing.T) {
	// The secret in one event, written in two chunks split inside it.
	body := eventsBody([]anthropictest.Event{anthropictest.Start("m"), anthropictest.BlockStart(0, `{"type":"text","text":""}`), anthropictest.TextDelta(0, testSecret)})
	cut := strings.Index(body, testSecret) + 20
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(body[:cut]))
		time.Sleep(10 * time.Millisecond)
		pw.Write([]byte(body[cut:]))
		pw.Close()
	}()
	var f frames
	_, err := FilterStream(context.Background(), &f, pr, FilterOptions{Checker: checker})
	if !errors.Is(err, ErrReflected) || strings.Contains(f.all(), testSecret[:20]) {
		t.Fatalf("error %v, worker got %q", err, f.all())
	}
}

func TestFilterStreamSilence(t *testing.T) {
	pr, pw := io.Pipe()
	go pw.Write([]byte(eventsBody([]anthropictest.Event{anthropictest.Start("m")})))
	var f frames
	began := time.Now()
	_, err := FilterStream(context.Background(), &f, pr, FilterOptions{Checker: checker, Silence: 100 * time.Millisecond})
	if !errors.Is(err, ErrSilence) {
		t.Fatalf("error = %v, want ErrSilence", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("silence took %v", d)
	}
	if !strings.Contains(f.all(), "message_start") || !strings.Contains(f.last(), "event: error") {
		t.Fatalf("worker got %q", f.all())
	}
}

// slowWorker takes hold to accept each event: time the stream spends
// outside an upstream read.
type slowWorker struct {
	frames
	hold time.Duration
}

func (w *slowWorker) WriteEvent(p []byte) error {
	<-time.After(w.hold)
	return w.frames.WriteEvent(p)
}

func TestFilterStreamSilenceIsNotATotalTime(t *testing.T) {
	// The stream lasts over twice the 100 ms silence limit, yet no read
	// waits on the upstream: the writer below is always already blocked on
	// the next chunk, and the time passes while the worker takes each event.
	// (Spacing upstream chunks 60 ms apart made each read's wait the
	// measured quantity, and a busy machine stretched one past 100 ms.)
	const silence = 100 * time.Millisecond
	evs := anthropictest.TextStream("m", "a", "b", "c", "d", "e")
	pr, pw := io.Pipe()
	go func() {
		for _, e := range evs {
			pw.Write([]byte(anthropictest.Frame(e)))
		}
		pw.Close()
	}()
	w := &slowWorker{hold: silence / 2}
	began := time.Now()
	if _, err := FilterStream(context.Background(), w, pr, FilterOptions{Checker: checker, Silence: silence}); err != nil {
		t.Fatalf("FilterStream: %v", err)
	}
	if took := time.Since(began); took < 2*silence || len(w.got) != len(evs) {
		t.Fatalf("%d of %d events in %v; want all of them over more than %v", len(w.got), len(evs), took, 2*silence)
	}
}

func TestFilterStreamDeadline(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte(eventsBody([]anthropictest.Event{anthropictest.Start("m")})))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var f frames
	_, err := FilterStream(ctx, &f, pr, FilterOptions{Checker: checker})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want the deadline", err)
	}
}

func TestFilterStreamMaxBytes(t *testing.T) {
	body := eventsBody(anthropictest.TextStream("m", strings.Repeat("x", 5000)))
	if _, _, err := run(t, body, FilterOptions{MaxBytes: 1000}); !errors.Is(err, ErrStream) {
		t.Fatalf("error = %v, want ErrStream (over the limit)", err)
	}
}

// endless produces text delta events forever, counting bytes read.
type endless struct {
	n     int64
	frame []byte
	off   int
}

func (e *endless) Read(p []byte) (int, error) {
	if e.n == 0 {
		s := eventsBody([]anthropictest.Event{anthropictest.Start("m"), anthropictest.BlockStart(0, `{"type":"text","text":""}`)})
		n := copy(p, s)
		e.n += int64(n)
		return n, nil
	}
	n := 0
	for n < len(p) {
		c := copy(p[n:], e.frame[e.off:])
		n += c
		e.off = (e.off + c) % len(e.frame)
	}
	e.n += int64(n)
	return n, nil
}
func (e *endless) Close() error { return nil }

// stuck accepts n events, then blocks until released.
type stuck struct {
	n       int
	release chan struct{}
	blocked chan struct{}
}

func (s *stuck) WriteEvent([]byte) error {
	if s.n == 0 {
		close(s.blocked)
		<-s.release
		return errors.New("client gone")
	}
	s.n--
	return nil
}

func TestFilterStreamBackpressure(t *testing.T) {
	src := &endless{frame: []byte(anthropictest.Frame(anthropictest.TextDelta(0, strings.Repeat("lorem ", 100))))}
	w := &stuck{n: 10, release: make(chan struct{}), blocked: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := FilterStream(context.Background(), w, src, FilterOptions{Checker: checker})
		done <- err
	}()
	<-w.blocked
	time.Sleep(50 * time.Millisecond)
	read := src.n
	// While the worker does not read, nothing more is read upstream: the
	// reader's buffer and one event at most.
	if read > 128<<10 {
		t.Errorf("read %d upstream bytes while the client was stuck, want at most 128 KiB", read)
	}
	time.Sleep(50 * time.Millisecond)
	if src.n != read {
		t.Errorf("upstream read went on while the client was stuck: %d then %d", read, src.n)
	}
	close(w.release)
	if err := <-done; !errors.Is(err, ErrClient) {
		t.Fatalf("error = %v, want ErrClient", err)
	}
}

func FuzzStreamReader(f *testing.F) {
	f.Add([]byte(eventsBody(anthropictest.ThinkingToolStream("m", "f", `{"a":`, `1}`))))
	f.Add([]byte("data: x\r\ndata: y\r\n\r\n: c\n\nevent: e\n\n"))
	f.Add([]byte("event: ping\ndata: {\"type\":\"ping\"}\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := NewStreamReader(bytes.NewReader(in))
		for range 10_000 {
			_, data, err := rd.NextRaw()
			if err != nil {
				break
			}
			if len(data) > MaxEventBytes {
				t.Fatalf("event of %d bytes", len(data))
			}
		}
		// Whatever the upstream sends, the worker never gets the secret.
		var fr frames
		_, _ = FilterStream(context.Background(), &fr, io.NopCloser(bytes.NewReader(append(in, []byte(testSecret)...))), FilterOptions{Checker: checker})
		if strings.Contains(fr.all(), testSecret) {
			t.Fatalf("secret passed")
		}
	})
}
