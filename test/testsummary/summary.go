package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string // build-output, build-fail
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// testKey names one test (or subtest) of one package.
type testKey struct{ pkg, test string }

type pkgState struct {
	passed, failed, skipped int // top-level tests
	output                  []string
}

// summary accumulates a stage's events.
type summary struct {
	stage   string
	verbose bool
	w       io.Writer

	start   time.Time
	pkgs    map[string]*pkgState
	outputs map[testKey][]string

	tests, passed, failed, skipped  int // top-level tests
	subtests, subFailed, subSkipped int
	pkgRan, pkgFailed, pkgSkipped   int
	noTestFiles, noTestsRun         []string
	buildFailed                     []string
	skipReasons                     map[string][]string // reason -> tests
	failedTests                     []string
	notJSON                         int

	// tally is each test's (and subtest's) runs and failures over the
	// whole stream: with -count or several streams, how often it failed.
	tally map[string]*runCount
}

// runCount is one test's outcomes over a stream.
type runCount struct{ runs, failed int }

func newSummary(stage string, verbose bool, w io.Writer) *summary {
	return &summary{
		stage: stage, verbose: verbose, w: w,
		pkgs:        map[string]*pkgState{},
		outputs:     map[testKey][]string{},
		skipReasons: map[string][]string{},
		tally:       map[string]*runCount{},
	}
}

// read consumes the whole stream. Lines that are not JSON (a panic of the
// test binary before test2json framing, a message of go itself) are printed
// as they are; a stream with no test events at all is an error.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	events := 0
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			s.notJSON++
			fmt.Fprintln(s.w, string(line))
			continue
		}
		events++
		s.add(e)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the test stream: %w", err)
	}
	if events == 0 {
		return errors.New("no test events on stdin (was go test run with -json?)")
	}
	return nil
}

func (s *summary) pkg(name string) *pkgState {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgState{}
		s.pkgs[name] = p
	}
	return p
}

func (s *summary) add(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.w, e.Output)
		return
	case "build-fail":
		s.buildFailed = append(s.buildFailed, e.ImportPath)
		return
	case "output":
		if s.verbose {
			fmt.Fprint(s.w, e.Output)
		}
		if e.Test == "" {
			p := s.pkg(e.Package)
			p.output = append(p.output, e.Output)
			return
		}
		k := testKey{e.Package, e.Test}
		s.outputs[k] = append(s.outputs[k], e.Output)
		return
	case "pass", "fail", "skip":
	default: // start, run, pause, cont, bench
		return
	}
	if e.Test == "" {
		s.endPackage(e)
		return
	}
	s.endTest(e)
}

func (s *summary) endTest(e event) {
	k := testKey{e.Package, e.Test}
	sub := strings.Contains(e.Test, "/")
	name := shortPkg(e.Package) + "." + e.Test
	if sub {
		s.subtests++
	} else {
		s.tests++
	}
	p := s.pkg(e.Package)
	if e.Action != "skip" {
		c := s.tally[name]
		if c == nil {
			c = &runCount{}
			s.tally[name] = c
		}
		c.runs++
		if e.Action == "fail" {
			c.failed++
		}
	}
	switch e.Action {
	case "pass":
		if !sub {
			s.passed++
			p.passed++
		}
	case "fail":
		if sub {
			s.subFailed++
		} else {
			s.failed++
			p.failed++
		}
		s.failedTests = append(s.failedTests, name)
		if !s.verbose {
			// A parent's output holds only its own lines; each failed
			// subtest prints its own.
			fmt.Fprint(s.w, strings.Join(s.outputs[k], ""))
		}
	case "skip":
		if sub {
			s.subSkipped++
		} else {
			s.skipped++
			p.skipped++
		}
		r := skipReason(s.outputs[k])
		s.skipReasons[r] = append(s.skipReasons[r], name)
	}
	delete(s.outputs, k)
}

func (s *summary) endPackage(e event) {
	p := s.pkg(e.Package)
	out := strings.Join(p.output, "")
	ran := p.passed + p.failed + p.skipped
	switch {
	case e.Action == "fail":
		s.pkgFailed++
		s.pkgRan++
		if !s.verbose {
			// Tests that never ended (a hang ended by the package timeout or
			// a signal): their output holds the goroutine dump.
			var open []testKey
			for k := range s.outputs {
				if k.pkg == e.Package {
					open = append(open, k)
				}
			}
			sort.Slice(open, func(i, j int) bool { return open[i].test < open[j].test })
			for _, k := range open {
				fmt.Fprintf(s.w, "--- UNFINISHED: %s.%s\n%s", shortPkg(k.pkg), k.test, strings.Join(s.outputs[k], ""))
				s.failedTests = append(s.failedTests, shortPkg(k.pkg)+"."+k.test+" (unfinished)")
				delete(s.outputs, k)
			}
			// What no test owns: a panic, a timeout, a failed build.
			fmt.Fprint(s.w, packageNoise(out))
		}
		if e.FailedBuild != "" {
			fmt.Fprintf(s.w, "FAIL\t%s [build failed: %s]\n", e.Package, e.FailedBuild)
		} else {
			fmt.Fprintf(s.w, "FAIL\t%s\t%.3fs\t%s\n", e.Package, e.Elapsed, counts(p.passed, p.failed, p.skipped))
		}
	case e.Action == "skip" || strings.Contains(out, "[no test files]"):
		s.noTestFiles = append(s.noTestFiles, shortPkg(e.Package))
	case ran == 0:
		// A TestMain that skips the whole package says why on its own.
		if msg := strings.TrimSpace(packageNoise(out)); msg != "" {
			s.pkgSkipped++
			s.skipReasons[msg] = append(s.skipReasons[msg], shortPkg(e.Package)+" (whole package)")
			break
		}
		s.noTestsRun = append(s.noTestsRun, shortPkg(e.Package))
	default:
		s.pkgRan++
		took := fmt.Sprintf("%.3fs", e.Elapsed)
		if strings.Contains(out, "(cached)") {
			took = "(cached)"
		}
		fmt.Fprintf(s.w, "ok  \t%s\t%s\t%s\n", e.Package, took, counts(p.passed, p.failed, p.skipped))
	}
	delete(s.pkgs, e.Package)
}

// packageNoise drops go test's own status lines from a package's output.
func packageNoise(out string) string {
	var keep []string
	for _, l := range strings.SplitAfter(out, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || t == "PASS" || t == "FAIL" || strings.HasPrefix(t, "ok ") || strings.HasPrefix(t, "FAIL\t") ||
			strings.HasPrefix(t, "coverage:") || t == "testing: warning: no tests to run" {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "")
}

func counts(passed, failed, skipped int) string {
	s := fmt.Sprintf("%d passed", passed)
	if failed > 0 {
		s += fmt.Sprintf(", %d FAILED", failed)
	}
	if skipped > 0 {
		s += fmt.Sprintf(", %d skipped", skipped)
	}
	return s
}

var fileLinePrefix = regexp.MustCompile(`^[\w.-]+\.go:\d+: `)

// skipReason is the message of a skipped test: its last output line that is
// not go test's own framing, without the file:line prefix.
func skipReason(out []string) string {
	var msg []string
	for _, l := range out {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		if m := fileLinePrefix.FindString(t); m != "" {
			msg = append(msg[:0], strings.TrimPrefix(t, m))
			continue
		}
		msg = append(msg, t) // a continuation line of a multi-line message
	}
	if len(msg) == 0 {
		return "(no reason given)"
	}
	return strings.Join(msg, " ")
}

// shortPkg drops the module path.
func shortPkg(p string) string {
	_, rest, ok := strings.Cut(p, "github.com/roundtable-sandbox/sandbox/")
	if ok {
		return rest
	}
	return p
}

func (s *summary) anyFailed() bool {
	return s.failed > 0 || s.subFailed > 0 || s.pkgFailed > 0 || len(s.buildFailed) > 0
}

// oneLine is the stage's summary line.
func (s *summary) oneLine() string {
	status := "passed"
	if s.anyFailed() {
		status = "FAILED"
	}
	l := fmt.Sprintf("%s: %s: %d tests ran in %d packages: %d passed, %d failed, %d skipped", s.stage, status,
		s.tests, s.pkgRan, s.passed, s.failed, s.skipped)
	if s.pkgSkipped > 0 {
		l += fmt.Sprintf("; %d packages skipped whole", s.pkgSkipped)
	}
	if s.subtests > 0 {
		l += fmt.Sprintf(" (and %d subtests: %d failed, %d skipped)", s.subtests, s.subFailed, s.subSkipped)
	}
	if !s.start.IsZero() {
		// testsummary starts with go test (one pipeline): build time included.
		l += " in " + seconds(time.Since(s.start).Round(100*time.Millisecond))
	}
	return l
}

func (s *summary) report() {
	w := s.w
	if len(s.noTestsRun) > 0 {
		fmt.Fprintf(w, "%d packages have no test matching this stage's selection: %s\n", len(s.noTestsRun), strings.Join(s.noTestsRun, " "))
	}
	if len(s.noTestFiles) > 0 {
		fmt.Fprintf(w, "%d packages have no test files: %s\n", len(s.noTestFiles), strings.Join(s.noTestFiles, " "))
	}
	if len(s.skipReasons) > 0 {
		fmt.Fprintln(w, "skipped, by reason:")
		reasons := make([]string, 0, len(s.skipReasons))
		for r := range s.skipReasons {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(i, j int) bool {
			a, b := len(s.skipReasons[reasons[i]]), len(s.skipReasons[reasons[j]])
			if a != b {
				return a > b
			}
			return reasons[i] < reasons[j]
		})
		for _, r := range reasons {
			names := s.skipReasons[r]
			slices.Sort(names)
			shown := names
			more := ""
			if len(shown) > 4 {
				shown, more = shown[:4], fmt.Sprintf(" and %d more", len(names)-4)
			}
			fmt.Fprintf(w, "  %3d  %s\n       (%s%s)\n", len(names), r, strings.Join(shown, ", "), more)
		}
	}
	if len(s.buildFailed) > 0 {
		fmt.Fprintf(w, "build failed: %s\n", strings.Join(s.buildFailed, " "))
	}
	if len(s.failedTests) > 0 {
		fmt.Fprintf(w, "failed tests: %s\n", strings.Join(s.failedTests, " "))
	}
	fmt.Fprintf(w, "== %s\n", s.oneLine())
}

// flakeReport is -tally's table: every test that failed at least once, with
// how many of its runs failed, most failures first; then the totals.
func (s *summary) flakeReport() string {
	var b strings.Builder
	names := make([]string, 0, len(s.tally))
	runs := 0
	for n, c := range s.tally {
		runs += c.runs
		if c.failed > 0 {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		a, c := s.tally[names[i]], s.tally[names[j]]
		if a.failed != c.failed {
			return a.failed > c.failed
		}
		return names[i] < names[j]
	})
	fmt.Fprintf(&b, "%s: %d failing tests (subtests included) of %d that ran, %d test runs in all\n", s.stage, len(names), len(s.tally), runs)
	for _, n := range names {
		c := s.tally[n]
		fmt.Fprintf(&b, "  %5d of %5d runs failed  %s\n", c.failed, c.runs, n)
	}
	return b.String()
}
