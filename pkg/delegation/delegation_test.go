package delegation

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func req(title, task string) Request {
	return Request{Title: title, Task: task, Author: Author{ID: "u1", Name: "Ann", PrincipalID: "p1"}}
}

// TestCheckTexts: the seed's limits and refusal texts, word for word.
func TestCheckTexts(t *testing.T) {
	l := DefaultLimits()
	cases := []struct {
		name string
		l    Limits
		r    Request
		want string // "" = accepted
	}{
		{"ok", l, req("Prices", "Find prices"), ""},
		{"no title", l, req("", "Find prices"), "title and task are required"},
		{"no task", l, req("Prices", ""), "title and task are required"},
		{"blank task", l, req("Prices", " \n\t"), "title and task are required"},
		{"both empty", l, req("", ""), "title and task are required"},
		{"task at bound", l, req("T", strings.Repeat("x", 4000)), ""},
		{"task over", l, req("T", strings.Repeat("x", 4001)), "the task is 4001 characters; keep it within 4000"},
		{"task counted in characters", l, req("T", strings.Repeat("é", 4000)), ""},
		{"task over, configured bound", func() Limits { l := l; l.MaxTaskChars = 10; return l }(), req("T", strings.Repeat("ü", 11)), "the task is 11 characters; keep it within 10"},
		{"title at bound", l, req(strings.Repeat("t", 200), "x"), ""},
		{"title over", l, req(strings.Repeat("t", 201), "x"), "the title is 201 characters; keep it within 200"},
		{"no author", l, Request{Title: "T", Task: "x"}, "author.id is required"},
		{"author name long", l, Request{Title: "T", Task: "x", Author: Author{ID: "a", Name: strings.Repeat("n", 257)}}, "author.name must be valid UTF-8 of at most 256 characters"},
		{"bad utf8", l, req("T", "\xff"), "task must be valid UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Check(tc.r)
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, ErrRefused) {
					t.Errorf("%v is not ErrRefused", err)
				}
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if got, want := Busy(2).Error(), "this channel already has 2 delegated tasks running; wait for one to report back"; got != want {
		t.Errorf("busy: got %q, want %q", got, want)
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newReg(l Limits, ret Retention) (*Registry, *clock) {
	c := &clock{time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	return NewRegistry(l, ret, c.now), c
}

// TestMaxRunningPerChannel: the bound counts a channel's unfinished jobs
// (queued and running), refuses with the seed's text and frees on finish;
// other channels are independent.
func TestMaxRunningPerChannel(t *testing.T) {
	r, _ := newReg(DefaultLimits(), DefaultRetention())
	a, err := r.Admit("a", "ch", 1, req("T", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admit("b", "ch", 1, req("T", "x")); err != nil {
		t.Fatal(err)
	}
	must := a.Start()
	if must != nil {
		t.Fatal(must)
	}
	_, err = r.Admit("c", "ch", 1, req("T", "x"))
	if err == nil || !errors.Is(err, ErrBusy) || err.Error() != "this channel already has 2 delegated tasks running; wait for one to report back" {
		t.Fatalf("third job: %v", err)
	}
	if _, err := r.Admit("d", "other", 1, req("T", "x")); err != nil {
		t.Errorf("another channel refused: %v", err)
	}
	a.Finish(Finish{Result: ResultOK, Report: "r"})
	if _, err := r.Admit("c", "ch", 1, req("T", "x")); err != nil {
		t.Errorf("after a finish: %v", err)
	}
	if n := r.Running("ch"); n != 2 {
		t.Errorf("running %d, want 2", n)
	}
}

// TestFinishBounds: the report is cut to MaxReportChars (marked), the
// diagnostic scrubbed and cut, a timeout reads the seed's text, and a job
// finishes once.
func TestFinishBounds(t *testing.T) {
	l := DefaultLimits()
	l.MaxReportChars, l.DiagnosticChars = 5, 40
	r, _ := newReg(l, DefaultRetention())
	j, _ := r.Admit("a", "ch", 1, req("T", "x"))
	j.Finish(Finish{Result: ResultOK, Report: "héllo world"})
	j.Finish(Finish{Result: ResultFailed, Reason: "late"})
	st := j.Status()
	if st.State != StateDone || st.Report != "héllo" || !st.ReportTruncated || st.Error != "" {
		t.Errorf("report: %+v", st)
	}
	k, _ := r.Admit("b", "ch", 1, req("T", "x"))
	k.Finish(Finish{Result: ResultTimeout, Reason: "ignored"})
	if st := k.Status(); st.State != StateFailed || st.Result != ResultTimeout || st.Error != "the worker ran out of time" {
		t.Errorf("timeout: %+v", st)
	}
	m, _ := r.Admit("c", "ch2", 1, req("T", "x"))
	m.Finish(Finish{Result: ResultFailed, Reason: "upstream said Authorization: Bearer sk-live-abcdefghijklmnopqrstuvwxyz0123 and more text after it"})
	st = m.Status()
	if strings.Contains(st.Error, "abcdefgh") || len([]rune(st.Error)) > 40 || !strings.HasPrefix(st.Error, "upstream said Authorization") {
		t.Errorf("diagnostic %q", st.Error)
	}
}

// TestScrub: planted credentials of each shape are redacted, the words
// around them kept.
func TestScrub(t *testing.T) {
	secret := "Zx9QmT4vLp2sK8wR"
	cases := []struct{ in, keep string }{
		{"Authorization: Bearer " + secret + "abcdef", "Authorization:"},
		{"api_key=" + secret, "api_key="},
		{`{"password": "` + secret + `"}`, `"password": "`},
		{"fetch https://user:" + secret + "@example.com/x failed", "https://[redacted]@example.com/x failed"},
		{"key sk-" + secret + " refused", "key [redacted] refused"},
		{"token ghp_" + secret, "token"},
		{"blob " + secret + secret + " end", "blob [redacted] end"},
		{"line one\nline two " + "secret: " + secret, "line one line two secret: [redacted]"},
	}
	for _, tc := range cases {
		got := Scrub(tc.in)
		if strings.Contains(got, secret) || strings.Contains(got, secret[:8]) {
			t.Errorf("Scrub(%q) = %q: the secret is left", tc.in, got)
		}
		if !strings.Contains(got, tc.keep) {
			t.Errorf("Scrub(%q) = %q, want it to keep %q", tc.in, got, tc.keep)
		}
	}
	if got := Scrub("the worker ran out of time"); got != "the worker ran out of time" {
		t.Errorf("plain text changed: %q", got)
	}
}

// TestStreamDelivery: finished jobs of a channel are pending for a viewer
// until collected, in finish order, only their owner's (or all for an
// admin); a waiter is woken by a finish.
func TestStreamDelivery(t *testing.T) {
	r, _ := newReg(DefaultLimits(), DefaultRetention())
	a, _ := r.Admit("a", "ch", 1, req("A", "x"))
	b, _ := r.Admit("b", "ch", 2, req("B", "x"))
	b.Finish(Finish{Result: ResultOK, Report: "rb"})
	a.Finish(Finish{Result: ResultOK, Report: "ra"})
	if p := r.Pending("ch", 1, false); len(p) != 1 || p[0].ID != "a" || p[0].Report != "ra" {
		t.Errorf("owner 1 pending %+v", p)
	}
	if p := r.Pending("ch", 0, true); len(p) != 2 || p[0].ID != "b" || p[1].ID != "a" {
		t.Errorf("admin pending %+v", p)
	}
	r.Collected("a", 1)
	if p := r.Pending("ch", 1, false); len(p) != 0 {
		t.Errorf("collected job still pending: %+v", p)
	}
	if p := r.Pending("ch", 0, true); len(p) != 2 {
		t.Errorf("another viewer lost its delivery: %+v", p)
	}
	got := make(chan []Status, 1)
	go func() {
		p, _ := r.Wait(context.Background(), "ch", 1, false)
		got <- p
	}()
	c, _ := r.Admit("c", "ch", 1, req("C", "x"))
	time.Sleep(10 * time.Millisecond)
	c.Finish(Finish{Result: ResultCancelled, Reason: "the channel was turned off"})
	select {
	case p := <-got:
		if len(p) != 1 || p[0].ID != "c" || p[0].State != StateCancelled || p[0].Error != "the channel was turned off" {
			t.Errorf("woken with %+v", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	r.Collected("c", 1)
	if _, err := r.Wait(ctx, "ch", 1, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("empty wait: %v", err)
	}
}

// TestRetention: finished jobs go by age, then by count (never the newest).
func TestRetention(t *testing.T) {
	r, c := newReg(DefaultLimits(), Retention{Retain: time.Hour, MaxRetained: 2})
	for _, id := range []string{"a", "b", "c"} {
		j, _ := r.Admit(id, "ch"+id, 1, req("T", "x"))
		j.Finish(Finish{Result: ResultOK, Report: id})
	}
	if _, err := r.Get("a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a kept over the count bound: %v", err)
	}
	if _, err := r.Get("c"); err != nil {
		t.Errorf("c: %v", err)
	}
	c.t = c.t.Add(2 * time.Hour)
	if _, err := r.Get("c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("c kept past Retain: %v", err)
	}
}

// TestCancelChannel: a cancel reaches set cancel functions, and one set
// later; other channels are untouched.
func TestCancelChannel(t *testing.T) {
	r, _ := newReg(DefaultLimits(), DefaultRetention())
	a, _ := r.Admit("a", "ch", 1, req("T", "x"))
	b, _ := r.Admit("b", "ch", 1, req("T", "x"))
	o, _ := r.Admit("o", "other", 1, req("T", "x"))
	var got []string
	a.SetCancel(func(error) { got = append(got, "a") })
	o.SetCancel(func(error) { got = append(got, "o") })
	if n := r.CancelChannel("ch", errors.New("off")); n != 2 {
		t.Errorf("asked %d, want 2", n)
	}
	b.SetCancel(func(error) { got = append(got, "b") })
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("cancelled %v, want a,b", got)
	}
}

// FuzzDiagnostic: whatever the reason, the diagnostic is valid UTF-8, one
// line, within its bound, and a planted key does not survive.
func FuzzDiagnostic(f *testing.F) {
	f.Add("upstream said Authorization: Bearer abc", 600)
	f.Add("password=hunter2hunter2 and more", 20)
	f.Add("\xff\x00line\nbreak", 5)
	const planted = "sk-proj-Q7wE9rT2yU4iO6pA8sD0fG"
	f.Fuzz(func(t *testing.T, reason string, max int) {
		if max < 1 || max > 4000 {
			max = 600
		}
		d := Diagnostic(reason+" "+planted+" "+reason, max)
		if !utf8.ValidString(d) || utf8.RuneCountInString(d) > max || strings.ContainsAny(d, "\n\r\x00") {
			t.Fatalf("Diagnostic = %q (max %d)", d, max)
		}
		if strings.Contains(d, planted[3:15]) {
			t.Fatalf("planted key survived: %q", d)
		}
	})
}
