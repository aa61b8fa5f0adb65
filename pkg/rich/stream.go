package rich

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic"
)

// Stream bounds: what the worker holds of one streamed answer (an event's
// data is bounded by anthropic.MaxEventBytes).
const (
	// MaxStreamBytes bounds the bytes of one answer (the broker's 50 MiB
	// upstream-response limit).
	MaxStreamBytes = anthropic.MaxResponseBytes
	// MaxBlocks bounds the content blocks of one answer.
	MaxBlocks = 64
	// MaxBlockBytes bounds one block's text, thinking or tool input. A
	// text or thinking block over it breaks the stream; a tool input over
	// it is dropped (the call then has no input and is answered with an
	// error the model reads), so the turn goes on.
	MaxBlockBytes = 4 << 20
)

var (
	// ErrStream: the stream broke (ended early, malformed, over a bound).
	ErrStream = errors.New("model stream broken")
	// ErrModelError: the stream carried an error event.
	ErrModelError = errors.New("model stream reported an error")
)

func streamErr(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrStream)
}

// countingReader fails once more than max bytes were read.
type countingReader struct {
	r    io.Reader
	n    int64
	max  int64
	over bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		c.over = true
		return n, streamErr("answer over %d bytes", c.max)
	}
	return n, err
}

// ReadStream assembles a streamed Messages answer from its server-sent
// events (framed by anthropic.StreamReader), consuming each as it arrives
// and holding only the assembled blocks; any break of the event order, a
// bound or JSON is ErrStream, an error event ErrModelError, an end before
// message_stop ErrStream.
func ReadStream(r io.Reader) (*Response, error) {
	cr := &countingReader{r: r, max: MaxStreamBytes}
	sr := anthropic.NewStreamReader(cr)
	var (
		resp    Response
		parts   []*blockParts // what the deltas of each block carried
		open    = -1          // the index of the open block
		started bool
	)
	for {
		ev, err := sr.Next()
		switch {
		case err == nil:
		case cr.over:
			return nil, streamErr("answer over %d bytes", MaxStreamBytes)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, streamErr("stream ended before message_stop")
		case errors.Is(err, anthropic.ErrStream):
			return nil, streamErr("malformed event")
		default:
			return nil, err
		}
		done, err := apply(&resp, &parts, &open, &started, &ev)
		if err != nil {
			return nil, err
		}
		if done {
			for i := range resp.Content {
				parts[i].finish(&resp.Content[i])
			}
			return &resp, nil
		}
	}
}

// blockParts gathers one block's deltas without quadratic copying.
type blockParts struct {
	text, thinking, signature, input bytes.Buffer
	inputOver                        bool // the tool input went over MaxBlockBytes: dropped
}

func (p *blockParts) size() int {
	return p.text.Len() + p.thinking.Len() + p.signature.Len() + p.input.Len()
}

func (p *blockParts) finish(b *ContentBlock) {
	b.Text += p.text.String()
	b.Thinking += p.thinking.String()
	b.Signature += p.signature.String()
	if b.Type == BlockToolUse {
		b.Input = nil
		if !p.inputOver {
			b.Input = toolInput(&p.input)
		}
	}
}

// toolInput is a tool_use block's input: nil when it is not one JSON object
// (max_tokens cut it short, or the model wrote something else).
func toolInput(b *bytes.Buffer) json.RawMessage {
	if b == nil || b.Len() == 0 {
		return json.RawMessage(`{}`)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b.Bytes(), &obj) != nil || obj == nil {
		return nil
	}
	return json.RawMessage(bytes.Clone(b.Bytes()))
}

func apply(resp *Response, inputs *[]*blockParts, open *int, started *bool, ev *streamEvent) (bool, error) {
	if ev.Type != "message_start" && ev.Type != "ping" && ev.Type != "error" && !*started {
		return false, streamErr("%s before message_start", safeType(ev.Type))
	}
	switch ev.Type {
	case "message_start":
		if *started || ev.Message == nil {
			return false, streamErr("message_start out of order")
		}
		*started = true
		resp.Usage = ev.Message.Usage
	case "content_block_start":
		if *open != -1 || ev.Index != len(resp.Content) || ev.ContentBlock == nil {
			return false, streamErr("content_block_start out of order")
		}
		if len(resp.Content) >= MaxBlocks {
			return false, streamErr("more than %d content blocks", MaxBlocks)
		}
		b := *ev.ContentBlock
		switch b.Type {
		case BlockText:
			b = ContentBlock{Type: BlockText, Text: b.Text}
		case BlockThinking:
			b = ContentBlock{Type: BlockThinking, Thinking: b.Thinking, Signature: b.Signature}
		case BlockRedactedThinking:
			b = ContentBlock{Type: BlockRedactedThinking, Data: b.Data}
		case BlockToolUse:
			b = ContentBlock{Type: BlockToolUse, ID: b.ID, Name: b.Name}
		default:
			return false, streamErr("content block of type %s", safeType(b.Type))
		}
		resp.Content = append(resp.Content, b)
		*inputs = append(*inputs, &blockParts{})
		*open = ev.Index
	case "content_block_delta":
		if *open == -1 || ev.Index != *open || ev.Delta == nil {
			return false, streamErr("content_block_delta out of order")
		}
		b := &resp.Content[*open]
		p := (*inputs)[*open]
		d := ev.Delta
		switch {
		case d.Type == "text_delta" && b.Type == BlockText:
			p.text.WriteString(d.Text)
		case d.Type == "thinking_delta" && b.Type == BlockThinking:
			p.thinking.WriteString(d.Thinking)
		case d.Type == "signature_delta" && b.Type == BlockThinking:
			p.signature.WriteString(d.Signature)
		case d.Type == "input_json_delta" && b.Type == BlockToolUse:
			if p.inputOver {
				break
			}
			if p.input.Len()+len(d.PartialJSON) > MaxBlockBytes {
				// Dropped, not held: the rest of the stream still counts
				// against MaxStreamBytes.
				p.inputOver = true
				p.input = bytes.Buffer{}
				break
			}
			p.input.WriteString(d.PartialJSON)
		default:
			return false, streamErr("delta %s does not fit its block", safeType(d.Type))
		}
		if n := len(b.Text) + len(b.Thinking) + len(b.Signature) + p.size(); n > MaxBlockBytes {
			return false, streamErr("content block over %d bytes", MaxBlockBytes)
		}
	case "content_block_stop":
		if *open == -1 || ev.Index != *open {
			return false, streamErr("content_block_stop out of order")
		}
		*open = -1
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			resp.StopReason = ev.Delta.StopReason
		}
		if ev.Usage != nil {
			// The cumulative output (and, from some models, input) counts.
			resp.Usage.OutputTokens = ev.Usage.OutputTokens
			if ev.Usage.InputTokens > 0 {
				resp.Usage.InputTokens = ev.Usage.InputTokens
			}
		}
	case "message_stop":
		if *open != -1 {
			return false, streamErr("message_stop inside a content block")
		}
		return true, nil
	case "ping":
	case "error":
		return false, ErrModelError
	default:
		// Unknown event types are skipped (the provider's versioning rule);
		// the broker passes only known ones.
	}
	return false, nil
}

// safeType keeps an event or block type fit for an error message.
func safeType(s string) string {
	if len(s) > 32 || !utf8.ValidString(s) {
		return "(unknown)"
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c == '_') {
			return "(unknown)"
		}
	}
	return s
}
