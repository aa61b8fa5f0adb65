package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const okTurn = `{"text":"hi","speaker":{"id":"u1","name":"Ann"},"model":"m","prompt":"p","timeZone":"UTC","reset":false,"tools":[{"name":"clock","description":"d","parameters":{"type":"object"}}],"mcp":[{"server":"docs","tools":[{"name":"search","description":"d","parameters":{"type":"object"}}]}]}`

func TestDecodeTurn(t *testing.T) {
	turn, err := DecodeTurn(strings.NewReader(okTurn))
	if err != nil {
		t.Fatalf("DecodeTurn(ok) = %v", err)
	}
	if turn.Speaker.Name != "Ann" || turn.MCP[0].Tools[0].Name != "search" {
		t.Errorf("decoded %+v", turn)
	}
	bad := map[string]string{
		"unknown field":  strings.Replace(okTurn, `"reset":false`, `"reset":false,"principalId":"p"`, 1),
		"trailing":       okTurn + `{}`,
		"long text":      strings.Replace(okTurn, `"text":"hi"`, `"text":"`+strings.Repeat("x", MaxTextChars+1)+`"`, 1),
		"long speaker":   strings.Replace(okTurn, `"id":"u1"`, `"id":"`+strings.Repeat("x", MaxIDChars+1)+`"`, 1),
		"bad tool name":  strings.Replace(okTurn, `"name":"clock"`, `"name":"Clock"`, 1),
		"bad server":     strings.Replace(okTurn, `"server":"docs"`, `"server":"a/b"`, 1),
		"no model":       strings.Replace(okTurn, `"model":"m"`, `"model":""`, 1),
		"bad zone":       strings.Replace(okTurn, `"timeZone":"UTC"`, `"timeZone":"Nowhere/Else"`, 1),
		"params not obj": strings.Replace(okTurn, `"parameters":{"type":"object"}}],"mcp"`, `"parameters":[1]}],"mcp"`, 1),
		"not json":       `hello`,
	}
	for name, in := range bad {
		if _, err := DecodeTurn(strings.NewReader(in)); err == nil {
			t.Errorf("%s: DecodeTurn = nil error, want refusal", name)
		}
	}
	big := bytes.Repeat([]byte(" "), MaxTurnBytes+1)
	if _, err := DecodeTurn(bytes.NewReader(big)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized turn err = %v, want ErrTooLarge", err)
	}
}

func TestDecodeReply(t *testing.T) {
	r, err := DecodeReply([]byte(`{"ok":true,"text":"hello"}` + "\n"))
	if err != nil || !r.OK || r.Text != "hello" {
		t.Fatalf("DecodeReply = %+v, %v", r, err)
	}
	r, err = DecodeReply([]byte(`{"ok":false,"text":"sorry","cause":"no space left on device"}`))
	if err != nil || r.Cause != CauseNoSpace {
		t.Fatalf("DecodeReply(failed with cause) = %+v, %v", r, err)
	}
	for _, in := range []string{`{"ok":true,"text":"a"}{"ok":false}`, `{"ok":true,"text":"a","x":1}`, ``, `[]`,
		`{"ok":false,"text":"a","cause":"made up\nline"}`, `{"ok":true,"text":"a","cause":"invalid turn"}`, `{"ok":false,"text":"a","cause":1}`} {
		if _, err := DecodeReply([]byte(in)); err == nil {
			t.Errorf("DecodeReply(%q) = nil error", in)
		}
	}
}

func TestNames(t *testing.T) {
	for _, tt := range []struct {
		name string
		tool bool
		fn   bool
	}{
		{"clock", true, true},
		{"host_clock", true, true},
		{"mcp_0_search", true, true},
		{"a" + strings.Repeat("b", 47), true, true},
		{"a" + strings.Repeat("b", 48), false, true},
		{"Clock", false, false},
		{"1abc", false, false},
		{"a-b", false, true},
		{"mcp_0_get-Tiny_image", false, true},
		{"a.b", false, false},
		{"a" + strings.Repeat("b", 63), false, true},
		{"a" + strings.Repeat("b", 64), false, false},
		{"-ab", false, false},
		{"_ab", false, false},
		{"", false, false},
	} {
		if got := ValidToolName(tt.name); got != tt.tool {
			t.Errorf("ValidToolName(%q) = %v, want %v", tt.name, got, tt.tool)
		}
		if got := ValidFunctionName(tt.name); got != tt.fn {
			t.Errorf("ValidFunctionName(%q) = %v, want %v", tt.name, got, tt.fn)
		}
	}
	if !ValidCallID("call_abc-1") || ValidCallID("") || ValidCallID("a b") || ValidCallID(strings.Repeat("a", 65)) {
		t.Error("ValidCallID wrong")
	}
}

func FuzzDecodeTurn(f *testing.F) {
	f.Add([]byte(okTurn))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		turn, err := DecodeTurn(bytes.NewReader(data))
		if err != nil {
			return
		}
		if err := turn.Validate(); err != nil {
			t.Fatalf("decoded turn fails Validate: %v", err)
		}
	})
}

func TestDecodeReplyFrame(t *testing.T) {
	tests := []struct {
		name  string
		frame string
		want  *Reply
	}{
		{"ok", `{"ok":true,"text":"hi"}` + "\n", &Reply{OK: true, Text: "hi"}},
		{"limit reply", `{"ok":false,"text":"limit"}` + "\n", &Reply{OK: false, Text: "limit"}},
		{"escaped newline in text", `{"ok":true,"text":"a\nb"}` + "\n", &Reply{OK: true, Text: "a\nb"}},
		{"failure cause", `{"ok":false,"text":"x","cause":"` + CauseBroker + `"}` + "\n", nil},
		{"no newline", `{"ok":true,"text":"hi"}`, nil},
		{"two lines", `{"ok":true,"text":"hi"}` + "\n" + `{"ok":true,"text":"hi"}` + "\n", nil},
		{"leading newline", "\n" + `{"ok":true,"text":"hi"}` + "\n", nil},
		{"unknown field", `{"ok":true,"text":"hi","x":1}` + "\n", nil},
		{"empty", "", nil},
		{"newline only", "\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeReplyFrame([]byte(tt.frame))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("DecodeReplyFrame(%q) = %+v, want an error", tt.frame, got)
				}
				return
			}
			if err != nil || *got != *tt.want {
				t.Fatalf("DecodeReplyFrame(%q) = %+v, %v; want %+v", tt.frame, got, err, tt.want)
			}
		})
	}
}

// FuzzDecodeReplyFrame: a frame taken is one line, a reply DecodeReply
// takes too, without a failure cause.
func FuzzDecodeReplyFrame(f *testing.F) {
	f.Add([]byte(`{"ok":true,"text":"hi"}` + "\n"))
	f.Add([]byte(`{"ok":false,"text":"x","cause":"internal error"}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeReplyFrame(data)
		if err != nil {
			return
		}
		if bytes.Count(data, []byte("\n")) != 1 || data[len(data)-1] != '\n' || r.Cause != "" {
			t.Fatalf("frame %q taken as %+v", data, r)
		}
		if again, err := DecodeReply(data); err != nil || *again != *r {
			t.Fatalf("DecodeReply(%q) = %+v, %v; want %+v", data, again, err, r)
		}
	})
}
