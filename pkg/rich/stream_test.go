package rich

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic"
)

func TestReadStreamAssembles(t *testing.T) {
	sse := start(7) + thinkingBlock(0, "hmm", "sig") + textBlock(1, "Hello there") +
		toolBlock(2, "toolu_9", "memory_get", `{"scope":"channel","key":"k"}`) + stop("tool_use", 42)
	// One byte at a time: events split anywhere still assemble.
	resp, err := ReadStream(iotest.OneByteReader(strings.NewReader(sse)))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 3 || resp.StopReason != "tool_use" || resp.Usage.InputTokens != 7 || resp.Usage.OutputTokens != 42 {
		t.Fatalf("resp = %+v", resp)
	}
	if c := resp.Content[0]; c.Type != BlockThinking || c.Thinking != "hmm" || c.Signature != "sig" {
		t.Errorf("thinking = %+v", c)
	}
	if c := resp.Content[1]; c.Type != BlockText || c.Text != "Hello there" {
		t.Errorf("text = %+v", c)
	}
	if c := resp.Content[2]; c.Type != BlockToolUse || c.ID != "toolu_9" || c.Name != "memory_get" || string(c.Input) != `{"scope":"channel","key":"k"}` {
		t.Errorf("tool_use = %+v input %s", c, c.Input)
	}
}

func TestReadStreamCRLFAndMultilineData(t *testing.T) {
	sse := strings.ReplaceAll(textAnswer("hi"), "\n", "\r\n")
	if resp, err := ReadStream(strings.NewReader(sse)); err != nil || resp.Content[0].Text != "hi" {
		t.Fatalf("CRLF stream: %+v, %v", resp, err)
	}
	// A data field split over two lines joins with a newline (JSON whitespace).
	split := strings.Replace(textAnswer("hi"), `data: {"type":"message_stop"}`, "data: {\"type\":\ndata: \"message_stop\"}", 1)
	if _, err := ReadStream(strings.NewReader(split)); err != nil {
		t.Fatalf("multi-line data: %v", err)
	}
}

func TestReadStreamToolInputNotAnObject(t *testing.T) {
	for _, in := range []string{`[1,2]`, `{"a":`, `"s"`, `null`} {
		resp, err := ReadStream(strings.NewReader(toolAnswer("toolu_1", "memory_get", in)))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if resp.Content[0].Input != nil {
			t.Errorf("input %s kept as %s, want nil (refused)", in, resp.Content[0].Input)
		}
	}
	resp, _ := ReadStream(strings.NewReader(start(1) + event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}`) +
		event("content_block_stop", `{"type":"content_block_stop","index":0}`) + stop("tool_use", 1)))
	if string(resp.Content[0].Input) != `{}` {
		t.Errorf("no deltas: input %s, want {}", resp.Content[0].Input)
	}
}

func TestReadStreamRefusals(t *testing.T) {
	blockStart := func(i int, typ string) string {
		return event("content_block_start", `{"type":"content_block_start","index":`+string(rune('0'+i))+`,"content_block":{"type":"`+typ+`"}}`)
	}
	huge := strings.Repeat("x", anthropic.MaxEventBytes+10)
	tests := []struct {
		name string
		sse  string
		want error
	}{
		{"empty", "", ErrStream},
		{"ends before message_stop", start(1) + textBlock(0, "hi"), ErrStream},
		{"ends inside a line", start(1) + "data: {\"type\":\"message_stop\"}", ErrStream},
		{"delta before message_start", textBlock(0, "hi") + stop("end_turn", 1), ErrStream},
		{"two message_starts", start(1) + start(1), ErrStream},
		{"not JSON", start(1) + "data: {nope\n\n", ErrStream},
		{"block index skips", start(1) + blockStart(1, "text"), ErrStream},
		{"nested block", start(1) + blockStart(0, "text") + blockStart(1, "text"), ErrStream},
		{"server tool block", start(1) + blockStart(0, "server_tool_use"), ErrStream},
		{"delta of the wrong kind", start(1) + blockStart(0, "text") +
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`), ErrStream},
		{"delta for a closed block", start(1) + textBlock(0, "a") +
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b"}}`), ErrStream},
		{"stop inside a block", start(1) + blockStart(0, "text") + event("message_stop", `{"type":"message_stop"}`), ErrStream},
		{"line over the bound", start(1) + "data: " + huge + "\n\n", ErrStream},
		{"error event", start(1) + event("error", `{"type":"error","error":{"type":"api_error","message":"x"}}`), ErrModelError},
		{"too many blocks", start(1) + strings.Repeat("x", 0) + func() string {
			s := ""
			for i := 0; i <= MaxBlocks; i++ {
				s += event("content_block_start", `{"type":"content_block_start","index":`+itoa(i)+`,"content_block":{"type":"text","text":""}}`) +
					event("content_block_stop", `{"type":"content_block_stop","index":`+itoa(i)+`}`)
			}
			return s
		}(), ErrStream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadStream(strings.NewReader(tt.sse))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestReadStreamBlockBound(t *testing.T) {
	chunk := strings.Repeat("y", 512<<10)
	q, _ := json.Marshal(chunk)
	var b strings.Builder
	b.WriteString(start(1) + event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	for i := 0; i < MaxBlockBytes/len(chunk)+1; i++ {
		b.WriteString(event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+string(q)+`}}`))
	}
	if _, err := ReadStream(strings.NewReader(b.String())); !errors.Is(err, ErrStream) {
		t.Fatalf("err = %v, want ErrStream for a block over %d bytes", err, MaxBlockBytes)
	}
}

// TestReadStreamToolInputBound: a tool input over MaxBlockBytes is
// dropped, not the stream: the answer reads to its end, the call with no
// input (turn.go answers it with an error), the blocks after it whole.
func TestReadStreamToolInputBound(t *testing.T) {
	chunk := strings.Repeat("y", 512<<10)
	q, _ := json.Marshal(`{"pad":"` + chunk)
	var b strings.Builder
	b.WriteString(start(1) + event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"host_x","input":{}}}`))
	for i := 0; i < MaxBlockBytes/len(chunk)+1; i++ {
		b.WriteString(event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+string(q)+`}}`))
	}
	b.WriteString(event("content_block_stop", `{"type":"content_block_stop","index":0}`))
	b.WriteString(event("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_2","name":"host_x","input":{}}}`))
	b.WriteString(event("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`))
	b.WriteString(event("content_block_stop", `{"type":"content_block_stop","index":1}`) + stop("tool_use", 9))
	resp, err := ReadStream(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("err = %v, want the answer with the over-bound input dropped", err)
	}
	if len(resp.Content) != 2 || resp.Content[0].Input != nil || string(resp.Content[1].Input) != `{"a":1}` || resp.StopReason != "tool_use" {
		t.Fatalf("content %d blocks, inputs %.40q and %q, stop %q: want the first nil, the second whole", len(resp.Content), resp.Content[0].Input, resp.Content[len(resp.Content)-1].Input, resp.StopReason)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func FuzzReadStream(f *testing.F) {
	f.Add(textAnswer("hello"))
	f.Add(toolAnswer("toolu_1", "memory_get", `{"scope":"channel"}`))
	f.Add(start(1) + thinkingBlock(0, "t", "s") + stop("end_turn", 1))
	f.Fuzz(func(t *testing.T, sse string) {
		resp, err := ReadStream(strings.NewReader(sse))
		if err != nil {
			if !errors.Is(err, ErrStream) && !errors.Is(err, ErrModelError) {
				t.Fatalf("error outside the categories: %v", err)
			}
			return
		}
		if len(resp.Content) > MaxBlocks {
			t.Fatalf("%d blocks", len(resp.Content))
		}
		for _, c := range resp.Content {
			if c.Type == BlockToolUse && c.Input != nil && !json.Valid(c.Input) {
				t.Fatalf("tool input not JSON: %s", c.Input)
			}
		}
	})
}

// endless yields a started stream followed by comment lines forever.
type endless struct{ head string }

func (e *endless) Read(p []byte) (int, error) {
	if e.head != "" {
		n := copy(p, e.head)
		e.head = e.head[n:]
		return n, nil
	}
	for i := range p {
		p[i] = ':'
		if i%1024 == 1023 {
			p[i] = '\n'
		}
	}
	return len(p), nil
}

func TestReadStreamTotalBound(t *testing.T) {
	_, err := ReadStream(&endless{head: start(1)})
	if !errors.Is(err, ErrStream) || !strings.Contains(err.Error(), "over") {
		t.Fatalf("err = %v, want ErrStream past %d bytes", err, MaxStreamBytes)
	}
}
