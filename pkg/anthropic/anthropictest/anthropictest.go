// Package anthropictest is a fake Anthropic upstream for tests: an
// httptest server on loopback that answers each request with the next
// scripted Reply (real-shaped server-sent events, a JSON body, raw chunks,
// an error status or a redirect) and records what it received.
package anthropictest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Event is one server-sent event as the fake writes it.
type Event struct{ Name, Data string }

// Reply is one scripted answer.
type Reply struct {
	// Status is the HTTP status (0: 200).
	Status int
	// Redirect answers 307 with this Location.
	Redirect string
	// Events are written one by one, each flushed, Delay apart.
	Events []Event
	// Chunks, when set, are written raw instead of Events, each flushed.
	Chunks []string
	// JSON, when Events and Chunks are empty, is the body.
	JSON  string
	Delay time.Duration
	// Endless keeps writing text deltas after the events until a write
	// fails or the request ends (backpressure tests).
	Endless bool
	// Hang stays silent after the events until the request ends.
	Hang bool
}

// Recorded is what one request carried.
type Recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// Server is the fake upstream.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	replies []Reply
	got     []Recorded
	// Written counts the body bytes written to clients.
	Written atomic.Int64
}

// New starts a fake that answers with replies in order (then 500), closed
// at the test's end.
func New(t testing.TB, replies ...Reply) *Server {
	s := &Server{replies: replies}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Push adds replies to the script.
func (s *Server) Push(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, replies...)
}

// Requests returns what the fake received so far.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.got...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.got = append(s.got, Recorded{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	var rep Reply
	if len(s.replies) > 0 {
		rep, s.replies = s.replies[0], s.replies[1:]
	} else {
		rep = Reply{Status: 500, JSON: `{"type":"error","error":{"type":"api_error","message":"no reply scripted"}}`}
	}
	s.mu.Unlock()
	if rep.Redirect != "" {
		http.Redirect(w, r, rep.Redirect, http.StatusTemporaryRedirect)
		return
	}
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	fl, _ := w.(http.Flusher)
	write := func(p string) bool {
		n, err := io.WriteString(w, p)
		s.Written.Add(int64(n))
		if err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	pause := func() bool {
		if rep.Delay == 0 {
			return true
		}
		select {
		case <-time.After(rep.Delay):
			return true
		case <-r.Context().Done():
			return false
		}
	}
	if len(rep.Events) == 0 && len(rep.Chunks) == 0 && !rep.Endless {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_fake")
		w.WriteHeader(status)
		write(rep.JSON)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	chunks := rep.Chunks
	if chunks == nil {
		for _, e := range rep.Events {
			chunks = append(chunks, Frame(e))
		}
	}
	for _, c := range chunks {
		if !write(c) || !pause() {
			return
		}
	}
	if rep.Endless {
		delta := Frame(Event{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat("lorem ipsum ", 80) + `"}}`})
		for write(delta) {
		}
		return
	}
	if rep.Hang {
		<-r.Context().Done()
	}
}

// Frame writes one event as the provider does.
func Frame(e Event) string { return "event: " + e.Name + "\ndata: " + e.Data + "\n\n" }

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Start is message_start with the model's name.
func Start(model string) Event {
	return Event{"message_start", `{"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant","model":` + js(model) +
		`,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}`}
}

// Ping is a ping event.
func Ping() Event { return Event{"ping", `{"type": "ping"}`} }

// BlockStart opens block index of a type ("text", "thinking", "tool_use").
func BlockStart(index int, block string) Event {
	return Event{"content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, index, block)}
}

// Delta is one content_block_delta.
func Delta(index int, delta string) Event {
	return Event{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, index, delta)}
}

// TextDelta, ThinkingDelta, SignatureDelta and InputDelta are the deltas.
func TextDelta(index int, s string) Event {
	return Delta(index, `{"type":"text_delta","text":`+js(s)+`}`)
}
func ThinkingDelta(index int, s string) Event {
	return Delta(index, `{"type":"thinking_delta","thinking":`+js(s)+`}`)
}
func SignatureDelta(index int, s string) Event {
	return Delta(index, `{"type":"signature_delta","signature":`+js(s)+`}`)
}
func InputDelta(index int, s string) Event {
	return Delta(index, `{"type":"input_json_delta","partial_json":`+js(s)+`}`)
}

// BlockStop closes block index.
func BlockStop(index int) Event {
	return Event{"content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, index)}
}

// End is message_delta with stop_reason and message_stop.
func End(stopReason string) []Event {
	return []Event{
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":` + js(stopReason) + `,"stop_sequence":null},"usage":{"output_tokens":15}}`},
		{"message_stop", `{"type":"message_stop"}`},
	}
}

// ErrorEvent is an error event as the provider sends mid-stream.
func ErrorEvent(typ, msg string) Event {
	return Event{"error", `{"type":"error","error":{"type":` + js(typ) + `,"message":` + js(msg) + `}}`}
}

// TextStream is a whole stream answering texts as one text block.
func TextStream(model string, texts ...string) []Event {
	ev := []Event{Start(model), BlockStart(0, `{"type":"text","text":""}`), Ping()}
	for _, t := range texts {
		ev = append(ev, TextDelta(0, t))
	}
	return append(append(ev, BlockStop(0)), End("end_turn")...)
}

// ThinkingToolStream is a whole stream with a thinking block, a text block
// and a tool_use block of tool name whose input arrives in pieces.
func ThinkingToolStream(model, tool string, inputPieces ...string) []Event {
	ev := []Event{
		Start(model),
		BlockStart(0, `{"type":"thinking","thinking":""}`),
		ThinkingDelta(0, "Let me think"), ThinkingDelta(0, " about it."),
		SignatureDelta(0, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"),
		BlockStop(0),
		BlockStart(1, `{"type":"text","text":""}`), TextDelta(1, "I'll check."), BlockStop(1),
		BlockStart(2, `{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":`+js(tool)+`,"input":{}}`),
	}
	for _, p := range inputPieces {
		ev = append(ev, InputDelta(2, p))
	}
	return append(append(ev, BlockStop(2)), End("tool_use")...)
}
