package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const pkgA = "github.com/roundtable-sandbox/sandbox/pkg/a"

// stream renders events as go test -json lines.
func stream(t *testing.T, evs ...event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range evs {
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(raw)
		b.WriteByte('\n')
	}
	return b.String()
}

func out(pkg, test, text string) event {
	return event{Action: "output", Package: pkg, Test: test, Output: text}
}

func TestSummary(t *testing.T) {
	passing := []event{
		{Action: "start", Package: pkgA},
		{Action: "run", Package: pkgA, Test: "TestOK"},
		out(pkgA, "TestOK", "=== RUN   TestOK\n"),
		out(pkgA, "TestOK", "--- PASS: TestOK (0.00s)\n"),
		{Action: "pass", Package: pkgA, Test: "TestOK"},
		{Action: "run", Package: pkgA, Test: "TestOK/sub"},
		{Action: "pass", Package: pkgA, Test: "TestOK/sub"},
		out(pkgA, "TestDocker", "=== RUN   TestDocker\n"),
		out(pkgA, "TestDocker", "    a_test.go:12: set SANDBOX_IT_DOCKER to run it\n"),
		out(pkgA, "TestDocker", "--- SKIP: TestDocker (0.00s)\n"),
		{Action: "skip", Package: pkgA, Test: "TestDocker"},
		out(pkgA, "TestDocker2", "    b_test.go:9: set SANDBOX_IT_DOCKER to run it\n"),
		{Action: "skip", Package: pkgA, Test: "TestDocker2"},
		{Action: "skip", Package: pkgA, Test: "TestBare"},
		out(pkgA, "", "PASS\n"),
		out(pkgA, "", "ok  \t"+pkgA+"\t0.01s\n"),
		{Action: "pass", Package: pkgA, Elapsed: 0.01},
	}
	noFiles := []event{
		{Action: "start", Package: "x/nofiles"},
		out("x/nofiles", "", "?   \tx/nofiles\t[no test files]\n"),
		{Action: "skip", Package: "x/nofiles"},
	}
	noRun := []event{
		{Action: "start", Package: "x/norun"},
		out("x/norun", "", "testing: warning: no tests to run\n"),
		out("x/norun", "", "PASS\n"),
		out("x/norun", "", "ok  \tx/norun\t0.003s [no tests to run]\n"),
		{Action: "pass", Package: "x/norun"},
	}
	mainSkip := []event{
		out("x/e2e", "", "e2e tests skipped: set SANDBOX_E2E=1\n"),
		out("x/e2e", "", "ok  \tx/e2e\t0.008s\n"),
		{Action: "pass", Package: "x/e2e"},
	}
	failing := []event{
		out(pkgA, "TestBad", "=== RUN   TestBad\n"),
		out(pkgA, "TestBad", "    a_test.go:20: got 1, want 2\n"),
		out(pkgA, "TestBad", "--- FAIL: TestBad (0.00s)\n"),
		{Action: "fail", Package: pkgA, Test: "TestBad"},
		out(pkgA, "", "FAIL\n"),
		{Action: "fail", Package: pkgA, Elapsed: 0.02},
	}
	panicking := []event{
		out(pkgA, "", "panic: boom\n"),
		out(pkgA, "", "FAIL\t"+pkgA+"\t0.02s\n"),
		{Action: "fail", Package: pkgA},
	}
	hanging := []event{
		{Action: "run", Package: pkgA, Test: "TestHang"},
		out(pkgA, "TestHang", "=== RUN   TestHang\n"),
		out(pkgA, "TestHang", "panic: test timed out after 10m0s\n\trunning tests:\n\t\tTestHang (10m0s)\n"),
		out(pkgA, "TestHang", "goroutine 7 [sync.Mutex.Lock]:\n"),
		out(pkgA, "", "FAIL\t"+pkgA+"\t600.1s\n"),
		{Action: "fail", Package: pkgA, Elapsed: 600.1},
	}
	build := []event{
		{Action: "build-output", ImportPath: pkgA + " [" + pkgA + ".test]", Output: "a.go:3:1: syntax error\n"},
		{Action: "build-fail", ImportPath: pkgA + " [" + pkgA + ".test]"},
		{Action: "fail", Package: pkgA, FailedBuild: pkgA + " [" + pkgA + ".test]"},
	}
	tests := []struct {
		name       string
		in         string
		wantFailed bool
		wantErr    bool
		wantLine   string
		wantOut    []string
		notOut     []string
	}{
		{
			name:     "counts and skip reasons",
			in:       stream(t, passing...),
			wantLine: "unit: passed: 4 tests ran in 1 packages: 1 passed, 0 failed, 3 skipped (and 1 subtests: 0 failed, 0 skipped)",
			wantOut: []string{"ok  \t" + pkgA + "\t0.010s\t1 passed, 3 skipped",
				"    2  set SANDBOX_IT_DOCKER to run it", "(pkg/a.TestDocker, pkg/a.TestDocker2)",
				"    1  (no reason given)"},
			notOut: []string{"=== RUN", "PASS\n"},
		},
		{
			name:     "packages without tests are one line each kind",
			in:       stream(t, append(noFiles, noRun...)...),
			wantLine: "unit: passed: 0 tests ran in 0 packages",
			wantOut:  []string{"1 packages have no test files: x/nofiles", "1 packages have no test matching this stage's selection: x/norun"},
			notOut:   []string{"[no tests to run]"},
		},
		{
			name:     "a TestMain skip is a reason",
			in:       stream(t, mainSkip...),
			wantLine: "1 packages skipped whole",
			wantOut:  []string{"e2e tests skipped: set SANDBOX_E2E=1", "x/e2e (whole package)"},
		},
		{
			name:       "a failed test prints its output",
			in:         stream(t, failing...),
			wantFailed: true,
			wantLine:   "unit: FAILED: 1 tests ran in 1 packages: 0 passed, 1 failed, 0 skipped",
			wantOut:    []string{"a_test.go:20: got 1, want 2", "--- FAIL: TestBad", "FAIL\t" + pkgA, "failed tests: pkg/a.TestBad"},
		},
		{
			name:       "a test that never ended prints its dump",
			in:         stream(t, hanging...),
			wantFailed: true,
			wantOut: []string{"--- UNFINISHED: pkg/a.TestHang", "panic: test timed out after 10m0s",
				"goroutine 7 [sync.Mutex.Lock]:", "failed tests: pkg/a.TestHang (unfinished)"},
		},
		{
			name:       "a package failing outside tests prints why",
			in:         stream(t, panicking...),
			wantFailed: true,
			wantOut:    []string{"panic: boom", "FAIL\t" + pkgA},
		},
		{
			name:       "a build failure fails",
			in:         stream(t, build...),
			wantFailed: true,
			wantOut:    []string{"a.go:3:1: syntax error", "build failed"},
		},
		{
			name:     "plain lines pass through",
			in:       "go: downloading x\n" + stream(t, noRun...),
			wantOut:  []string{"go: downloading x"},
			wantLine: "0 tests ran",
		},
		{
			name:    "no events is an error",
			in:      "not json at all\n",
			wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			s := newSummary("unit", false, &buf)
			err := s.read(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("read error = %v, want error %v", err, tc.wantErr)
			}
			s.report()
			if got := s.anyFailed(); got != tc.wantFailed {
				t.Errorf("anyFailed() = %v, want %v", got, tc.wantFailed)
			}
			got := buf.String()
			if !strings.Contains(s.oneLine(), tc.wantLine) {
				t.Errorf("oneLine() = %q, want it to contain %q", s.oneLine(), tc.wantLine)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tc.notOut {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, got)
				}
			}
		})
	}
}

func TestSkipReason(t *testing.T) {
	tests := []struct {
		out  []string
		want string
	}{
		{[]string{"=== RUN   T\n", "    x_test.go:5: no docker\n", "--- SKIP: T (0.00s)\n"}, "no docker"},
		{[]string{"    x_test.go:5: first\n", "    x_test.go:9: second\n"}, "second"},
		{[]string{"    x_test.go:5: line one\n", "        line two\n"}, "line one line two"},
		{[]string{"--- SKIP: T (0.00s)\n"}, "(no reason given)"},
	}
	for _, tc := range tests {
		if got := skipReason(tc.out); got != tc.want {
			t.Errorf("skipReason(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}

// TestFlakeReport: over repeated runs, each test that failed at least once
// is listed with its failure count out of its runs; passing ones are not.
func TestFlakeReport(t *testing.T) {
	var evs []event
	for i := 0; i < 3; i++ {
		evs = append(evs, event{Action: "pass", Package: pkgA, Test: "TestSteady"})
		act := "pass"
		if i == 1 {
			act = "fail"
		}
		evs = append(evs, event{Action: act, Package: pkgA, Test: "TestFlaky"})
		evs = append(evs, event{Action: "skip", Package: pkgA, Test: "TestSkipped"})
	}
	evs = append(evs, event{Action: "fail", Package: pkgA})
	var w bytes.Buffer
	s := newSummary("stress", false, &w)
	if err := s.read(strings.NewReader(stream(t, evs...))); err != nil {
		t.Fatal(err)
	}
	got := s.flakeReport()
	want := "stress: 1 failing tests (subtests included) of 2 that ran, 6 test runs in all\n" +
		"      1 of     3 runs failed  pkg/a.TestFlaky\n"
	if got != want {
		t.Errorf("flakeReport =\n%s\nwant\n%s", got, want)
	}
}
