package precheck

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTodayInZone(t *testing.T) {
	tests := []struct{ fired, zone, want string }{
		// Just after midnight in a zone east of UTC: the local date, not UTC's.
		{"2026-11-30T23:05:00Z", "Europe/Berlin", "2026-12-01"},
		{"2026-11-30T15:30:00Z", "Asia/Tokyo", "2026-12-01"},
		{"2026-12-01T00:30:00Z", "America/New_York", "2026-11-30"},
		{"2026-12-01T00:30:00+01:00", "UTC", "2026-11-30"},
	}
	for _, tt := range tests {
		loc, err := time.LoadLocation(tt.zone)
		if err != nil {
			t.Skipf("no zone data for %s: %v", tt.zone, err)
		}
		at, _ := time.Parse(time.RFC3339, tt.fired)
		if got := Today(at, loc); got != tt.want {
			t.Errorf("Today(%s, %s) = %s, want %s", tt.fired, tt.zone, got, tt.want)
		}
	}
}

func TestJobValidateRefusals(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Job)
		want string
	}{
		{"empty script", func(j *Job) { j.Script = "" }, "script"},
		{"script over its bound", func(j *Job) { j.Script = strings.Repeat("x", MaxScriptBytes+1) }, "script"},
		{"bad firedAt", func(j *Job) { j.FiredAt = "yesterday" }, "firedAt"},
		{"bad today", func(j *Job) { j.Today = "2026-1-1" }, "today"},
		{"bad zone", func(j *Job) { j.TimeZone = "a\nb" }, "timeZone"},
		{"long schedule", func(j *Job) { j.Schedule = strings.Repeat("s", MaxScheduleChars+1) }, "schedule"},
		{"duplicate server", func(j *Job) { j.Servers = append(j.Servers, j.Servers[0]) }, "server names"},
		{"server without tools", func(j *Job) { j.Servers[0].Tools = nil }, "must grant"},
		{"bad tool name", func(j *Job) { j.Servers[0].Tools = []string{"a b"} }, "tool names"},
		{"timeout", func(j *Job) { j.TimeoutMs = 10 }, "timeoutMs"},
		{"calls", func(j *Job) { j.MaxCalls = MaxCallsLimit + 1 }, "maxCalls"},
		{"note", func(j *Job) { j.MaxNoteChars = 0 }, "maxNoteChars"},
		{"context", func(j *Job) { j.MaxContextChars = MaxContextCharsLimit + 1 }, "maxContextChars"},
		{"heap", func(j *Job) { j.MaxHeapBytes = 1 }, "maxHeapBytes"},
	}
	for _, tt := range tests {
		j := testJob("export default () => ({ wake: false })")
		j.Servers = []Server{{Name: "search", Tools: []string{"lookup"}}}
		tt.mod(&j)
		err := j.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an ErrInvalid naming %q", tt.name, err, tt.want)
		}
	}
	j := testJob("x")
	if err := j.Validate(); err != nil {
		t.Fatalf("valid job refused: %v", err)
	}
}

func TestResultValidate(t *testing.T) {
	l := Limits{MaxNoteChars: 5, MaxContextChars: 5}
	good := []Result{{}, {Note: "hello"}, {Wake: true, Context: "ctx"}, {Error: "e", Kind: KindThrow}}
	for _, r := range good {
		if err := r.Validate(l); err != nil {
			t.Errorf("%+v refused: %v", r, err)
		}
	}
	badOnes := []Result{
		{Wake: true}, {Wake: true, Context: "c", Note: "n"}, {Context: "c"}, {Note: "123456"},
		{Wake: true, Context: "123456"}, {Error: "e"}, {Error: "e", Kind: "other"}, {Kind: KindThrow},
		{Error: "e", Kind: KindThrow, Wake: true}, {Error: "a\nb", Kind: KindThrow},
		{Error: strings.Repeat("e", MaxErrorChars+1), Kind: KindThrow}, {Note: "\xff"},
	}
	for _, r := range badOnes {
		if err := r.Validate(l); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v accepted (%v)", r, err)
		}
	}
	if _, err := DecodeResult([]byte(`{"wake":false,"extra":1}`), l); err == nil {
		t.Error("unknown field accepted")
	}
	if _, err := DecodeResult([]byte(`{"wake":false} {}`), l); err == nil {
		t.Error("trailing data accepted")
	}
	if _, err := DecodeResult([]byte(`{"wake":false,"note":"`+strings.Repeat(" ", int(l.MaxResultBytes()))+`"}`), l); err == nil {
		t.Error("oversized result accepted")
	}
}

// TestDecodeResultErrorsQuoteNothing: the host logs a decoding error, so
// it names the category only, never a key, value or character the
// container chose.
func TestDecodeResultErrorsQuoteNothing(t *testing.T) {
	l := Limits{MaxNoteChars: 100, MaxContextChars: 200}
	for _, tt := range []struct{ name, in, want string }{
		{"unknown field", `{"wake":false,"INJECTED_KEY":1}`, "unknown field"},
		{"wrong type", `{"wake":"INJECTED_VALUE"}`, "not one object of the known fields and types"},
		{"syntax", `{"wake":false,INJECTED}`, "not one object of the known fields and types"},
		{"not an object", `"INJECTED"`, "not one object of the known fields and types"},
		{"trailing data", `{"wake":false} "INJECTED"`, "trailing data after the object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeResult([]byte(tt.in), l)
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if strings.Contains(err.Error(), "INJECTED") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want %q and nothing of the input", err, tt.want)
			}
		})
	}
}

func testJob(script string) Job {
	return Job{
		Script: script, FiredAt: "2026-11-30T23:30:00Z", TimeZone: "Europe/Berlin", Today: "2026-12-01",
		Schedule: "every day at 00:30", Servers: []Server{{Name: "search", Tools: []string{"lookup", "fail"}}},
		TimeoutMs: 2000, MaxCalls: 4, MaxNoteChars: 100, MaxContextChars: 200, MaxHeapBytes: 512 << 20,
	}
}

// FuzzDecodeResult: a container's answer never panics the host, and what
// it accepts is a valid result within its bounds.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range []string{`{"wake":false}`, `{"wake":true,"context":"c"}`, `{"wake":false,"note":"n"}`,
		`{"wake":false,"error":"e","kind":"throw"}`, `{"wake":true}`, `[]`, `{"wake":false,"note":"\u0000"}`} {
		f.Add([]byte(s))
	}
	l := Limits{MaxNoteChars: 10, MaxContextChars: 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := DecodeResult(data, l)
		if err != nil {
			return
		}
		if verr := res.Validate(l); verr != nil {
			t.Fatalf("accepted an invalid result %+v: %v", res, verr)
		}
	})
}
