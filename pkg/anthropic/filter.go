package anthropic

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
)

// DefaultSilence is the seed's silence limit: no request-body read or
// response chunk for this long ends a call.
const DefaultSilence = 120 * time.Second

// MaxToolInputBytes bounds one tool_use block's streamed input JSON, which
// FilterStream holds to check whole before passing the block's stop.
const MaxToolInputBytes = 16 << 20

// More error categories of FilterStream.
var (
	// ErrUpstreamError: the upstream sent an error event (the worker got a
	// generic one).
	ErrUpstreamError = errors.New("upstream sent an error event")
	// ErrClient: writing to the worker failed (gone, or not reading within
	// the silence limit).
	ErrClient = errors.New("writing to the client failed")
)

// Checker finds credentials in what the upstream sends; the broker builds
// it from pkg/credential (this package does not link credentials).
type Checker interface {
	// Value reports whether a decoded JSON value (strictjson's) reflects a
	// credential.
	Value(v any) bool
	// Text returns a fresh check of one text that arrives in pieces: each
	// call appends a piece and reports whether the text so far reflects a
	// credential (credential.Stream).
	Text() func(piece string) bool
}

// EventWriter takes one framed event ("event: ...\ndata: ...\n\n") and
// delivers it (write and flush) before returning; the broker bounds the
// write by the silence limit.
type EventWriter interface {
	WriteEvent(frame []byte) error
}

// FilterOptions bound FilterStream.
type FilterOptions struct {
	// Silence: no upstream chunk for this long ends the stream (0:
	// DefaultSilence).
	Silence time.Duration
	// MaxBytes bounds the upstream bytes read (0: MaxResponseBytes).
	MaxBytes int64
	// Checker is required.
	Checker Checker
}

// FilterResult describes a filtered stream for the log (never content).
type FilterResult struct {
	Events int   // events passed to the worker
	Bytes  int64 // upstream bytes read
}

// Public error event types the worker may see (the upstream's, when it is
// one of these, else api_error); the message is always the broker's own.
var publicErrorTypes = map[string]string{
	"api_error":        "upstream failed",
	"overloaded_error": "upstream overloaded",
	"rate_limit_error": "upstream rate limited",
	"timeout_error":    "upstream timed out",
}

// ErrorFrame is the generic error event FilterStream ends a refused stream
// with; typ is a public error type (api_error when unknown).
func ErrorFrame(typ string) []byte {
	msg, ok := publicErrorTypes[typ]
	if !ok {
		typ, msg = "api_error", publicErrorTypes["api_error"]
	}
	data, _ := Encode(ErrorBody{Type: "error", Error: APIError{Type: typ, Message: msg}})
	return frame(EventError, data)
}

func frame(name string, data []byte) []byte {
	out := make([]byte, 0, len(name)+len(data)+16)
	out = append(out, "event: "...)
	out = append(out, name...)
	out = append(out, "\ndata: "...)
	out = append(out, data...)
	return append(out, "\n\n"...)
}

// guard is the upstream body as FilterStream reads it: bounded in bytes,
// closed after Silence without a chunk, and at ctx's end.
type guard struct {
	src     io.ReadCloser
	n, max  int64
	silence time.Duration
	timer   *time.Timer
	silent  atomic.Bool
}

var errOverLimit = &refusal{"upstream answer over the limit", ErrStream}

func (g *guard) Read(p []byte) (int, error) {
	g.timer.Reset(g.silence)
	n, err := g.src.Read(p)
	g.timer.Stop()
	if g.n+int64(n) > g.max {
		// Nothing past the limit is ever parsed.
		n = int(g.max - g.n)
		g.n = g.max + 1
		return n, errOverLimit
	}
	g.n += int64(n)
	if err != nil && g.silent.Load() {
		return n, &refusal{"upstream silent", ErrSilence}
	}
	return n, err
}

// block is the state of one open content block.
type block struct {
	typ   string
	text  func(string) bool // the block's streamed text, checked across deltas
	input []byte            // tool_use: the input JSON so far
}

// deltaFor: which delta types each block type admits.
var deltaFor = map[string]map[string]bool{
	BlockText:             {DeltaText: true},
	BlockThinking:         {DeltaThinking: true, DeltaSignature: true},
	BlockRedactedThinking: {},
	BlockToolUse:          {DeltaInputJSON: true},
}

// FilterStream reads the upstream's events from src and passes each checked
// event to w as soon as it is checked, re-encoded from what was checked;
// it returns nil after message_stop. Events of unknown types are dropped
// (the provider may add some). It refuses, ending the stream with a generic
// error event: malformed events, an event's type not its name, content
// blocks other than text, thinking, redacted_thinking and tool_use, a delta
// that does not fit its block, any event reflecting a credential (each
// block's text is checked across its deltas, and a tool_use input is decoded
// and checked whole before its content_block_stop passes, so a credential
// in a tool input never reaches the worker as an input it could act on), a
// tool input that is not JSON unless it is the start of one JSON value that
// max_tokens cut (cutinput.go: its decoded text is checked as far as it
// goes, and its stop is held until the message_delta and passes only with
// stop reason max_tokens), an upstream error event (passed as a generic one of the same public type),
// silence, more than MaxBytes, ctx's end and a stream that ends before
// message_stop. Memory is bounded by one event, one tool input and the
// checks' tails; nothing is read from src while w blocks (backpressure).
func FilterStream(ctx context.Context, w EventWriter, src io.ReadCloser, o FilterOptions) (FilterResult, error) {
	if o.Silence <= 0 {
		o.Silence = DefaultSilence
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = MaxResponseBytes
	}
	if o.Checker == nil {
		return FilterResult{}, errors.New("anthropic: FilterStream needs a Checker")
	}
	g := &guard{src: src, max: o.MaxBytes, silence: o.Silence}
	g.timer = time.AfterFunc(time.Hour, func() { g.silent.Store(true); src.Close() })
	g.timer.Stop()
	defer g.timer.Stop()
	stop := context.AfterFunc(ctx, func() { src.Close() })
	defer stop()

	var res FilterResult
	fail := func(err error, typ string) (FilterResult, error) {
		res.Bytes = g.n
		if ctx.Err() != nil && !errors.Is(err, ErrReflected) {
			err = &refusal{"deadline reached mid-stream", ctx.Err()}
		}
		if !errors.Is(err, ErrClient) {
			_ = w.WriteEvent(ErrorFrame(typ))
		}
		return res, err
	}
	rd := NewStreamReader(g)
	blocks := map[int64]*block{}
	// held: a cut tool input's content_block_stop and the pings after it,
	// passed only when the message_delta says max_tokens (else refused).
	var held [][]byte
	for {
		name, data, err := rd.NextRaw()
		if err != nil {
			var r *refusal
			switch {
			case errors.As(err, &r):
				return fail(err, "api_error")
			case err == io.EOF || err == io.ErrUnexpectedEOF:
				return fail(&refusal{"stream ended before message_stop", ErrStream}, "api_error")
			}
			return fail(&refusal{"upstream read failed", ErrStream}, "api_error")
		}
		switch name {
		case EventMessageStart, EventContentBlockStart, EventContentBlockDelta, EventContentBlockStop,
			EventMessageDelta, EventMessageStop, EventPing, EventError:
		default:
			continue // unknown: dropped, never passed
		}
		v, err := strictjson.DecodeObject(data)
		if err != nil || v["type"] != name {
			return fail(&refusal{"malformed event", ErrStream}, "api_error")
		}
		if name == EventError {
			typ := ""
			if e, ok := v["error"].(map[string]any); ok {
				typ, _ = e["type"].(string)
			}
			return fail(&refusal{"upstream error event", ErrUpstreamError}, typ)
		}
		if o.Checker.Value(v) {
			return fail(&refusal{"event reflects a credential", ErrReflected}, "api_error")
		}
		err = checkBlocks(name, v, blocks, o.Checker)
		cut := err == errCutInput
		if err != nil && !cut {
			return fail(err, "api_error")
		}
		out, err := Encode(v)
		if err != nil {
			return fail(&refusal{"event not encodable", ErrStream}, "api_error")
		}
		fr := frame(name, out)
		switch {
		case cut:
			held = append(held, fr)
			continue
		case held == nil:
		case name == EventPing && len(held) < maxHeldFrames:
			held = append(held, fr)
			continue
		case name == EventMessageDelta && endsAtMaxTokens(v):
			// The cut tool block was the message's last: its stop, the
			// stop reason and the usage the client needs to go on.
			for _, h := range held {
				if err := w.WriteEvent(h); err != nil {
					res.Bytes = g.n
					return res, &refusal{"client write failed", ErrClient}
				}
				res.Events++
			}
			held = nil
		default:
			return fail(&refusal{"tool input is not JSON and the message does not end at max_tokens", ErrStream}, "api_error")
		}
		if err := w.WriteEvent(fr); err != nil {
			res.Bytes = g.n
			return res, &refusal{"client write failed", ErrClient}
		}
		res.Events++
		if name == EventMessageStop {
			res.Bytes = g.n
			return res, nil
		}
	}
}

// checkBlocks follows the content blocks: their types, their deltas, the
// credential checks across deltas and of whole tool inputs.
func checkBlocks(name string, v map[string]any, blocks map[int64]*block, c Checker) error {
	bad := func(msg string) error { return &refusal{msg, ErrStream} }
	var idx int64
	if name == EventContentBlockStart || name == EventContentBlockDelta || name == EventContentBlockStop {
		var ok bool
		if idx, ok = strictjson.Integer(v["index"]); !ok || idx < 0 || idx > 10_000 {
			return bad("content block index invalid")
		}
	}
	switch name {
	case EventContentBlockStart:
		cb, ok := v["content_block"].(map[string]any)
		if !ok {
			return bad("content_block_start without a block")
		}
		typ, _ := cb["type"].(string)
		if _, ok := deltaFor[typ]; !ok {
			return bad("content block type not allowed") // server_tool_use, web_search_tool_result, ...
		}
		if _, open := blocks[idx]; open {
			return bad("content block started twice")
		}
		blocks[idx] = &block{typ: typ, text: c.Text()}
	case EventContentBlockDelta:
		b, ok := blocks[idx]
		d, _ := v["delta"].(map[string]any)
		if !ok || d == nil {
			return bad("delta outside its block")
		}
		typ, _ := d["type"].(string)
		if !deltaFor[b.typ][typ] {
			return bad("delta type does not fit its block")
		}
		field := map[string]string{DeltaText: "text", DeltaThinking: "thinking", DeltaSignature: "signature", DeltaInputJSON: "partial_json"}[typ]
		piece, ok := d[field].(string)
		if !ok {
			return bad("delta without its text")
		}
		if typ != DeltaSignature && b.text(piece) {
			return &refusal{"streamed text reflects a credential", ErrReflected}
		}
		if typ == DeltaInputJSON {
			if len(b.input)+len(piece) > MaxToolInputBytes {
				return bad("tool input over the limit")
			}
			b.input = append(b.input, piece...)
		}
	case EventContentBlockStop:
		b, ok := blocks[idx]
		if !ok {
			return bad("stop of a block never started")
		}
		delete(blocks, idx)
		if b.typ == BlockToolUse && len(b.input) > 0 {
			in, err := strictjson.Decode(b.input)
			if err != nil {
				// max_tokens may have cut it (cutinput.go): checked whole
				// as far as it goes, held until the stop reason says so.
				text, ok := cutInputText(b.input)
				if !ok {
					return bad("tool input is not JSON")
				}
				if c.Value(text) {
					return &refusal{"tool input reflects a credential", ErrReflected}
				}
				return errCutInput
			}
			if c.Value(in) {
				return &refusal{"tool input reflects a credential", ErrReflected}
			}
		}
	}
	return nil
}

// errCutInput: a tool block's input is not JSON but the start of one JSON
// value, checked clean; its content_block_stop passes only if the message
// ends at max_tokens.
var errCutInput = errors.New("tool input cut short")

// maxHeldFrames bounds the frames held after a cut tool input's stop (the
// stop and pings) until the message_delta.
const maxHeldFrames = 16

// endsAtMaxTokens reports whether a message_delta event's stop reason is
// max_tokens.
func endsAtMaxTokens(v map[string]any) bool {
	d, _ := v["delta"].(map[string]any)
	return d != nil && d["stop_reason"] == "max_tokens"
}
