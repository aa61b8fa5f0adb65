package workerlog

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

type entry struct {
	msg  string
	pri  journal.Priority
	vars map[string]string
}

type recorder struct {
	mu      sync.Mutex
	entries []entry
}

func (r *recorder) send(msg string, pri journal.Priority, vars map[string]string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, entry{msg, pri, vars})
	return nil
}

func (r *recorder) with(id string) []entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []entry
	for _, e := range r.entries {
		if e.vars["SYSLOG_IDENTIFIER"] == id {
			out = append(out, e)
		}
	}
	return out
}

func TestLinesForwardedWithTagAndPriority(t *testing.T) {
	r := &recorder{}
	f := New(DefaultLimits(), r.send, nil)
	s := f.Turn("guild:1", "t1", "roundtable-sandbox-x")
	// Lines may arrive split across writes.
	for _, w := range []string{`{"level":"INFO","msg":"a"}` + "\n" + `{"level":"ERR`, `OR","msg":"b"}` + "\n\n", `tail without newline`} {
		if n, err := s.Write([]byte(w)); err != nil || n != len(w) {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	st := s.Close()
	got := r.with("sandbox/guild:1")
	want := []struct {
		msg string
		pri journal.Priority
	}{{`{"level":"INFO","msg":"a"}`, journal.PriInfo}, {`{"level":"ERROR","msg":"b"}`, journal.PriWarning}, {"tail without newline", journal.PriInfo}}
	if len(got) != len(want) || st.Lines != 3 || st.Dropped != 0 {
		t.Fatalf("entries %+v stats %+v, want %d lines", got, st, len(want))
	}
	for i, w := range want {
		if got[i].msg != w.msg || got[i].pri != w.pri || got[i].vars["CONTAINER_NAME"] != "roundtable-sandbox-x" || got[i].vars["SANDBOX_TURN"] != "t1" {
			t.Errorf("entry %d = %+v, want %q at priority %d", i, got[i], w.msg, w.pri)
		}
	}
}

func TestTurnBoundsAndClosingLine(t *testing.T) {
	tests := []struct {
		name         string
		limits       func(*Limits)
		input        string
		lines, drops int
		cut          int
	}{
		{"line count", func(l *Limits) { l.TurnLines = 3 }, strings.Repeat("x\n", 10), 3, 7, 0},
		{"byte count", func(l *Limits) { l.TurnBytes = 10 }, strings.Repeat("abcd\n", 5), 2, 3, 0},
		{"long line cut", func(l *Limits) { l.LineBytes = 8 }, strings.Repeat("y", 100) + "\nshort\n", 2, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			l := DefaultLimits()
			tt.limits(&l)
			s := New(l, r.send, nil).Turn("c", "t", "n")
			s.Write([]byte(tt.input))
			st := s.Close()
			if st.Lines != tt.lines || st.Dropped != tt.drops || st.Truncated != tt.cut {
				t.Errorf("stats %+v, want lines %d dropped %d cut %d", st, tt.lines, tt.drops, tt.cut)
			}
			got := r.with("sandbox/c")
			if tt.drops+tt.cut > 0 {
				last := got[len(got)-1].msg
				if !strings.Contains(last, fmt.Sprintf("%d worker log lines over this turn's bound were dropped, %d cut", tt.drops, tt.cut)) {
					t.Errorf("closing line = %q", last)
				}
			}
			for _, e := range got {
				if len(e.msg) > l.LineBytes+len(" [cut]") && !strings.HasPrefix(e.msg, "sandbox:") {
					t.Errorf("forwarded a %d-byte line over LineBytes %d", len(e.msg), l.LineBytes)
				}
			}
		})
	}
}

func TestHardBoundIsAnError(t *testing.T) {
	l := DefaultLimits()
	l.HardBytes = 100
	s := New(l, (&recorder{}).send, nil).Turn("c", "t", "n")
	if _, err := s.Write(make([]byte, 100)); err != nil {
		t.Fatalf("100 bytes within a 100-byte bound: %v", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, ErrOverflow) {
		t.Errorf("one byte over the hard bound: %v, want ErrOverflow", err)
	}
}

// A flooding channel takes at most its turn's lines; the host-wide window
// leaves room for another channel and ends with the window.
func TestFloodLeavesOtherChannels(t *testing.T) {
	r := &recorder{}
	now := time.Unix(1000, 0)
	l := DefaultLimits()
	f := New(l, r.send, func() time.Time { return now })
	flood := f.Turn("flood", "t1", "n1")
	for i := 0; i < 100_000; i++ {
		flood.Write([]byte("flood line\n"))
	}
	other := f.Turn("quiet", "t2", "n2")
	for i := 0; i < 50; i++ {
		fmt.Fprintf(other, "quiet line %d\n", i)
	}
	fs, qs := flood.Close(), other.Close()
	if fs.Lines != l.TurnLines || qs.Lines != 50 || qs.Dropped != 0 {
		t.Errorf("flood forwarded %d (want %d), quiet %d of 50 (dropped %d)", fs.Lines, l.TurnLines, qs.Lines, qs.Dropped)
	}
	// The same channel's next turn within the window gets nothing more.
	again := f.Turn("flood", "t3", "n3")
	again.Write([]byte("one more\n"))
	if st := again.Close(); st.Lines != 0 {
		t.Errorf("a channel's second flooding turn in one window forwarded %d lines", st.Lines)
	}
	// Many flooding channels at once: the window holds, and it refills.
	for i := 0; i < 10; i++ {
		s := f.Turn(fmt.Sprintf("f%d", i), "t", "n")
		for j := 0; j < 2000; j++ {
			s.Write([]byte("z\n"))
		}
		s.Close()
	}
	if n := len(r.entries) - 13; n > l.WindowLines { // closing lines are outside the window
		t.Errorf("%d lines forwarded within one window, over %d", n, l.WindowLines)
	}
	now = now.Add(l.Window)
	late := f.Turn("late", "t", "n")
	late.Write([]byte("after the window\n"))
	if st := late.Close(); st.Lines != 1 {
		t.Errorf("after the window ended a line was dropped: %+v", st)
	}
}
