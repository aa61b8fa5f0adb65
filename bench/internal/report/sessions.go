package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// FileSessions is the session series' results file.
const FileSessions = "sessions.json"

// Goals of issue 36 (measured, never asserted in tests).
const (
	TargetSessionExecP50Ms     = 5.0
	TargetSessionExecP95Ms     = 15.0
	TargetSessionExecRatio     = 0.05
	TargetSessionFileMs        = 25.0
	TargetSessionResumeMs      = 100.0
	TargetSessionPausedCPUUsec = 0
)

// Sessions is sessions.json (sandbox-bench sessions): one session of the
// installed host measured through its API beside `docker exec` of the same
// container.
type Sessions struct {
	Rounds    int       `json:"rounds"`
	Warmup    int       `json:"warmup"`
	FileBytes int       `json:"fileBytes"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	LoadStart string    `json:"loadStart"`
	LoadEnd   string    `json:"loadEnd"`
	Skipped   string    `json:"skipped,omitempty"`
	// CreateMs: POST /v1/sessions to its answer (the supervisor up), each
	// on no standby (the shipped sessions.standby: 0); StandbyCreateMs the
	// same on a ready standby (sessions.standby: 1, each create waiting
	// off the clock until the host lists the standby ready), StandbyNote
	// why not measured.
	CreateMs            []float64 `json:"createMs"`
	StandbyCreateMs     []float64 `json:"standbyCreateMs,omitempty"`
	StandbyNote         string    `json:"standbyNote,omitempty"`
	ExecMs              []float64 `json:"execMs"`
	DockerExecMs        []float64 `json:"dockerExecMs"`
	PutMs               []float64 `json:"putMs"`
	GetMs               []float64 `json:"getMs"`
	ResumeFirstOutputMs []float64 `json:"resumeFirstOutputMs"`
	// A paused session's cost over PausedWindowMs, from its cgroup.
	PausedCPUUsec     int64    `json:"pausedCpuUsec"`
	PausedWindowMs    int64    `json:"pausedWindowMs"`
	PausedMemoryBytes int64    `json:"pausedMemoryBytes"`
	PausedNote        string   `json:"pausedNote,omitempty"`
	Failures          []string `json:"failures,omitempty"`
}

// writeSessions renders section 1c.
func writeSessions(b *strings.Builder, s *Sessions) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 1c. Sessions: a sandbox that lives across execs\n\n")
	if s == nil {
		p("Not measured in this run.\n\n")
		return
	}
	if s.Skipped != "" {
		p("Skipped: %s\n\n", s.Skipped)
		return
	}
	p("One session of the installed host (shipped `sessions.*` defaults) through its API as root, beside `docker exec` of the same container, interleaved (alternating which goes first), %d rounds after %d warm-up; a %d KiB file put and got each round; then pause and an exec's first output (the host resumes it on the request); then a paused session's CPU and memory read from its cgroup. Load average %s at start, %s at end.\n\n",
		s.Rounds, s.Warmup, s.FileBytes>>10, s.LoadStart, s.LoadEnd)
	p("| series | n | median ms | p95 ms | max ms |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range []struct {
		name string
		xs   []float64
	}{
		{"exec of `true` (API, NDJSON to its result)", s.ExecMs},
		{"docker exec of `true` (same container)", s.DockerExecMs},
		{fmt.Sprintf("put %d KiB (API, `files/raw`: the bytes as the body)", s.FileBytes>>10), s.PutMs},
		{fmt.Sprintf("get %d KiB (API, `files/raw`)", s.FileBytes>>10), s.GetMs},
		{"resume from pause to an exec's first output", s.ResumeFirstOutputMs},
		{"session create to ready (no standby)", s.CreateMs},
		{"session create to ready (a ready standby, `sessions.standby: 1`)", s.StandbyCreateMs},
	} {
		x := stats.Summarize(r.xs)
		if x.N == 0 {
			p("| %s | 0 | - | - | - |\n", r.name)
			continue
		}
		p("| %s | %d | %s | %s | %s |\n", r.name, x.N, ms(x.Median), ms(x.P95), ms(x.Max))
	}
	if s.StandbyNote != "" {
		p("\nSession create on a ready standby: %s\n", oneLine(s.StandbyNote))
	} else if a, b := stats.Summarize(s.CreateMs), stats.Summarize(s.StandbyCreateMs); a.N > 0 && b.N > 0 {
		p("\nSession create with and without a ready standby (median / p95): %s / %s ms on a standby, %s / %s ms cold.\n",
			ms(b.Median), ms(b.P95), ms(a.Median), ms(a.P95))
	}
	if s.PausedNote != "" {
		p("\nA paused session's cost: %s\n", oneLine(s.PausedNote))
	} else {
		p("\nA paused session used %d µs of CPU over %d ms and held %s of memory.\n", s.PausedCPUUsec, s.PausedWindowMs, mib(s.PausedMemoryBytes>>10))
	}
	for _, f := range s.Failures {
		p("- failure: `%s`\n", oneLine(f))
	}
	p("\n")
}

// pausedCPURow is issue 36's goal "a paused session costs no CPU": its
// cgroup's CPU usage over a window while paused, and the memory it
// holds beside it.
const pausedCPURow = "a paused session costs no CPU"

// targetsSessions are the rows of issue 36's goals.
func targetsSessions(in *Inputs) []Target {
	s := in.Sessions
	if s == nil || s.Skipped != "" {
		why := "no sessions.json in this run"
		if s != nil {
			why = s.Skipped
		}
		return []Target{
			notMeasured("session exec of `true`: p50 / p95", fmt.Sprintf("<= %.0f / %.0f ms", TargetSessionExecP50Ms, TargetSessionExecP95Ms), why),
			notMeasured("session exec / docker exec (medians)", fmt.Sprintf("<= %.2f", TargetSessionExecRatio), why),
			notMeasured("session 1 MiB put / get (medians)", fmt.Sprintf("<= %.0f ms each", TargetSessionFileMs), why),
			notMeasured("session resume from pause to first output (median)", fmt.Sprintf("<= %.0f ms", TargetSessionResumeMs), why),
			notMeasured(pausedCPURow, "0 µs of CPU (its cgroup's usage) while paused", why),
		}
	}
	ex, de := stats.Summarize(s.ExecMs), stats.Summarize(s.DockerExecMs)
	put, get := stats.Summarize(s.PutMs), stats.Summarize(s.GetMs)
	rs := stats.Summarize(s.ResumeFirstOutputMs)
	failed := len(s.Failures) > 0
	var out []Target
	t := Target{What: "session exec of `true`: p50 / p95", Target: fmt.Sprintf("<= %.0f / %.0f ms", TargetSessionExecP50Ms, TargetSessionExecP95Ms)}
	t.Measured = fmt.Sprintf("%s / %s ms (n %d)", ms(ex.Median), ms(ex.P95), ex.N)
	t.Verdict = verdict(ex.N > 0, !failed && ex.Median <= TargetSessionExecP50Ms && ex.P95 <= TargetSessionExecP95Ms)
	out = append(out, t)
	t = Target{What: "session exec / docker exec (medians)", Target: fmt.Sprintf("<= %.2f", TargetSessionExecRatio)}
	r := stats.Ratio(ex.Median, de.Median)
	t.Measured = fmt.Sprintf("%.3f (%s / %s ms)", r, ms(ex.Median), ms(de.Median))
	t.Verdict = verdict(ex.N > 0 && de.N > 0, r <= TargetSessionExecRatio)
	out = append(out, t)
	t = Target{What: fmt.Sprintf("session %d KiB put / get (medians)", s.FileBytes>>10), Target: fmt.Sprintf("<= %.0f ms each", TargetSessionFileMs)}
	t.Measured = fmt.Sprintf("%s / %s ms", ms(put.Median), ms(get.Median))
	t.Verdict = verdict(put.N > 0 && get.N > 0, put.Median <= TargetSessionFileMs && get.Median <= TargetSessionFileMs)
	out = append(out, t)
	t = Target{What: "session resume from pause to first output (median)", Target: fmt.Sprintf("<= %.0f ms", TargetSessionResumeMs)}
	t.Measured = fmt.Sprintf("%s ms (p95 %s, n %d)", ms(rs.Median), ms(rs.P95), rs.N)
	t.Verdict = verdict(rs.N > 0, rs.Median <= TargetSessionResumeMs)
	out = append(out, t)
	t = Target{What: pausedCPURow, Target: "0 µs of CPU (its cgroup's usage) while paused"}
	if s.PausedNote != "" {
		t.Measured, t.Verdict = oneLine(s.PausedNote), verdict(false, false)
	} else {
		t.Measured = fmt.Sprintf("%d µs over %d ms; memory held %s", s.PausedCPUUsec, s.PausedWindowMs, mib(s.PausedMemoryBytes>>10))
		t.Verdict = verdict(true, s.PausedCPUUsec <= TargetSessionPausedCPUUsec)
	}
	return append(out, t)
}
