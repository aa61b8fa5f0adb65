package anthropic

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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

func TestFilterStreamSilenceIsNotATotalTime(t *testing.T) {
	// Chunks 50 ms apart for longer than the 1 s silence limit (1.5 s in
	// all). The gap is a twentieth of the limit: 60 ms against 100 ms was
	// passed now and then on a loaded machine.
	texts := make([]string, 26)
	for i := range texts {
		texts[i] = "x"
	}
	evs := anthropictest.TextStream("m", texts...)
	pr, pw := io.Pipe()
	go func() {
		for _, e := range evs {
			pw.Write([]byte(anthropictest.Frame(e)))
			time.Sleep(50 * time.Millisecond)
		}
		pw.Close()
	}()
	var f frames
	began := time.Now()
	if _, err := FilterStream(context.Background(), &f, pr, FilterOptions{Checker: checker, Silence: time.Second}); err != nil {
		t.Fatalf("FilterStream: %v", err)
	}
	if d := time.Since(began); d <= time.Second {
		t.Fatalf("the stream took %v, not longer than the silence limit", d)
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

// cutToolStream is a stream as the API sends it under the
// fine-grained-tool-streaming-2025-05-14 beta when max_tokens ends the
// output inside a tool input (recorded shape: ids, usage and the beta's
// unbuffered input_json_delta pieces): the input is not JSON.
func cutToolStream(pieces []string, stopReason string) string {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":2,\"service_tier\":\"standard\"}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	b.WriteString("event: ping\ndata: {\"type\": \"ping\"}\n\n")
	b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"I'll write the file.\"}}\n\n")
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"write_reply_file\",\"input\":{}}}\n\n")
	for _, p := range pieces {
		d, _ := Encode(map[string]any{"type": "content_block_delta", "index": json.Number("1"), "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
		b.WriteString("event: content_block_delta\ndata: " + string(d) + "\n\n")
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"" + stopReason + "\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":200}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.String()
}

// TestFilterStreamPassesAToolInputCutAtMaxTokens: a tool input that
// max_tokens cut (not JSON) passes with its block's stop, the stop reason
// and the usage, once its decoded text is checked whole for a credential.
func TestFilterStreamPassesAToolInputCutAtMaxTokens(t *testing.T) {
	for _, tt := range []struct {
		name   string
		pieces []string
	}{
		{"cut inside a string", []string{`{"name": "notes.md", "te`, `xt": "# Notes\n\nThe first part of a long`}},
		{"cut after a key", []string{`{"name": "notes.md", "text":`}},
		{"cut inside an escape", []string{`{"name": "a.txt", "text": "caf\u00`}},
		{"cut after a high surrogate", []string{`{"name": "a.txt", "text": "cat \ud83d`}},
		{"cut inside a number", []string{`{"name": "a.txt", "n": [1, 2.`}},
		{"cut inside a literal", []string{`{"name": "a.txt", "ok": tr`}},
		{"cut after the opening brace", []string{`{`}},
		{"cut in nested values", []string{`{"a": {"b": [{"c": "d"}, "e`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := cutToolStream(tt.pieces, "max_tokens")
			f, res, err := run(t, body, FilterOptions{})
			if err != nil {
				t.Fatalf("FilterStream: %v; the worker got:\n%s", err, f.all())
			}
			if res.Events != 9+len(tt.pieces) {
				t.Errorf("%d events passed, want %d", res.Events, 9+len(tt.pieces))
			}
			rd := NewStreamReader(strings.NewReader(f.all()))
			var input strings.Builder
			var stop string
			var types []string
			outTokens := 0
			for {
				ev, err := rd.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				types = append(types, ev.Type)
				if ev.Delta != nil {
					input.WriteString(ev.Delta.PartialJSON)
					if ev.Delta.StopReason != "" {
						stop = ev.Delta.StopReason
					}
				}
				if ev.Usage != nil {
					outTokens = ev.Usage.OutputTokens
				}
			}
			if input.String() != strings.Join(tt.pieces, "") || stop != "max_tokens" || outTokens != 200 {
				t.Errorf("worker got input %q, stop %q, output tokens %d", input.String(), stop, outTokens)
			}
			if n := len(types); n < 3 || types[n-3] != "content_block_stop" || types[n-2] != "message_delta" || types[n-1] != "message_stop" {
				t.Errorf("event order %v", types)
			}
		})
	}
}

// TestFilterStreamRefusesACutToolInput: a cut tool input passes only when
// the message ends at max_tokens, only when it is the start of one JSON
// value, and never with a credential in its decoded text.
func TestFilterStreamRefusesACutToolInput(t *testing.T) {
	esc := func(s string) string {
		var b strings.Builder
		for _, c := range s {
			fmt.Fprintf(&b, `\u%04x`, c)
		}
		return b.String()
	}
	for _, tt := range []struct {
		name string
		body string
		want error
	}{
		{"cut input but the message ends at end_turn", cutToolStream([]string{`{"a": "b`}, "end_turn"), ErrStream},
		{"cut input but the message ends at tool_use", cutToolStream([]string{`{"a": "b`}, "tool_use"), ErrStream},
		{"credential escaped in the cut string", cutToolStream([]string{`{"text": "key ` + esc(testSecret[:30]), esc(testSecret[30:])}, "max_tokens"), ErrReflected},
		{"credential escaped in a whole string before the cut", cutToolStream([]string{`{"text": "` + esc(testSecret) + `", "more": "x`}, "max_tokens"), ErrReflected},
		{"credential escaped in a key", cutToolStream([]string{`{"` + esc(testSecret) + `": `}, "max_tokens"), ErrReflected},
		{"not the start of a JSON value", cutToolStream([]string{`{"a" 1`}, "max_tokens"), ErrStream},
		{"a second value", cutToolStream([]string{`{} {"a": `}, "max_tokens"), ErrStream},
		{"a whole value with a duplicate key", cutToolStream([]string{`{"a": 1, "a": 2}`}, "max_tokens"), ErrStream},
		{"an unpaired low surrogate before the cut", cutToolStream([]string{`{"a": "\udc00", "b": "c`}, "max_tokens"), ErrStream},
		{"a bad escape at the cut", cutToolStream([]string{`{"a": "b\x`}, "max_tokens"), ErrStream},
		{"a raw control character at the cut", cutToolStream([]string{"{\"a\": \"b\x01"}, "max_tokens"), ErrStream},
		{"a block after the cut one", strings.Replace(cutToolStream([]string{`{"a": "b`}, "max_tokens"), "event: message_delta",
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: message_delta", 1), ErrStream},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, _, err := run(t, tt.body, FilterOptions{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("FilterStream error = %v, want %v", err, tt.want)
			}
			// Neither the cut block's stop nor the stop reason passed.
			for _, fr := range f.got {
				if strings.HasPrefix(string(fr), "event: content_block_stop\n") && strings.Contains(string(fr), `"index":1`) ||
					strings.Contains(string(fr), `"max_tokens"`) || strings.HasPrefix(string(fr), "event: message_delta\n") {
					t.Errorf("the worker got %q", fr)
				}
			}
			if !strings.HasPrefix(f.last(), "event: error\n") {
				t.Errorf("last frame %q, want a generic error event", f.last())
			}
		})
	}
}
