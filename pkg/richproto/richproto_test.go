package richproto

import (
	"errors"
	"strings"
	"testing"
)

func TestTurnValidate(t *testing.T) {
	ok := Turn{ID: strings.Repeat("a", 32), Text: "hi", Speaker: Speaker{ID: "u1"}, Thinking: "low", DeadlineUnixMs: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Turn){
		"id":       func(t *Turn) { t.ID = "x" },
		"upper id": func(t *Turn) { t.ID = strings.Repeat("A", 32) },
		"text":     func(t *Turn) { t.Text = strings.Repeat("x", MaxTextChars+1) },
		"utf8":     func(t *Turn) { t.Text = "\xff" },
		"speaker":  func(t *Turn) { t.Speaker.ID = "" },
		"thinking": func(t *Turn) { t.Thinking = "max" },
		"deadline": func(t *Turn) { t.DeadlineUnixMs = 0 },
	} {
		tt := ok
		mutate(&tt)
		if err := tt.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestResultValidate(t *testing.T) {
	ok := Result{TurnID: strings.Repeat("b", 32), OK: true, Text: "done", Files: []File{{Name: "a.png", Data: []byte{1}}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, MaxReplyFileBytes+1)
	for name, mutate := range map[string]func(*Result){
		"turn":      func(r *Result) { r.TurnID = "" },
		"slash":     func(r *Result) { r.Files = []File{{Name: "../x"}} },
		"dotdot":    func(r *Result) { r.Files = []File{{Name: ".."}} },
		"big":       func(r *Result) { r.Files = []File{{Name: "a", Data: big}} },
		"count":     func(r *Result) { r.Files = make([]File, MaxReplyFiles+1) },
		"total":     func(r *Result) { r.Files = []File{{Name: "a", Data: big[:MaxReplyFileBytes]}, {Name: "b", Data: big[:MaxReplyFileBytes]}, {Name: "c", Data: big[:MaxReplyFileBytes]}, {Name: "d", Data: big[:MaxReplyFileBytes]}, {Name: "e", Data: big[:MaxReplyFileBytes]}, {Name: "f", Data: big[:1]}} },
		"long text": func(r *Result) { r.Text = strings.Repeat("x", MaxTextChars+1) },
	} {
		rr := ok
		mutate(&rr)
		if err := rr.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
