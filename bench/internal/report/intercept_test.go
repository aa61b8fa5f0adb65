package report

import (
	"strings"
	"testing"
)

// interceptSample is go test -bench output as bench/run.sh section 3c
// writes it (two -count runs, noise lines between).
const interceptSample = `goos: linux
pkg: github.com/roundtable-sandbox/sandbox/pkg/broker
BenchmarkInterceptPaired/reused/small-2   2000  300000 ns/op  120000 intercept-ns/op  1.20 ratio  100000 tunnel-ns/op
BenchmarkInterceptPaired/reused/small-2   2000  300000 ns/op  140000 intercept-ns/op  1.40 ratio  100000 tunnel-ns/op
BenchmarkInterceptPaired/reused/small-2   2000  300000 ns/op  125000 intercept-ns/op  1.25 ratio  100000 tunnel-ns/op
BenchmarkInterceptPaired/reused/1MiB-2    100   9000000 ns/op  6000000 intercept-ns/op  2.00 ratio  3000000 tunnel-ns/op
BenchmarkIntercept/tunnel/fresh/small-2   200   4000000 ns/op  300000 B/op  3000 allocs/op
BenchmarkIntercept/intercept/fresh/small-2 200  5000000 ns/op  310000 B/op  3100 allocs/op
BenchmarkIntercept/tunnel/fresh/1MiB-2    100   8000000 ns/op
BenchmarkIntercept/intercept/fresh/1MiB-2 100  12000000 ns/op
PASS
pkg: github.com/roundtable-sandbox/sandbox/pkg/credential
BenchmarkGuard-2          100  3000000 ns/op  349.50 MB/s
BenchmarkGuardPercent-2   100  4000000 ns/op  262.10 MB/s
ok
`

// TestTargetsIntercept: the goal row reads the median of the paired
// ratios, the other cases and the guard are reported, and a run without
// the file says so.
func TestTargetsIntercept(t *testing.T) {
	in := &Inputs{Intercept: ParseGoBench(interceptSample)}
	got := targetsIntercept(in)
	if len(got) != 5 {
		t.Fatalf("%d rows, want 5: %+v", len(got), got)
	}
	if got[0].Verdict != "met" || !strings.HasPrefix(got[0].Measured, "1.25x (125 / 100 us, n 3)") {
		t.Errorf("goal row: %+v", got[0])
	}
	if !strings.HasPrefix(got[1].Measured, "2.00x") || !strings.HasPrefix(got[2].Measured, "1.25x") || !strings.HasPrefix(got[3].Measured, "1.50x") {
		t.Errorf("other cases: %+v", got[1:4])
	}
	if got[4].Measured != "350 / 262 MB/s (median of 1)" {
		t.Errorf("guard row: %+v", got[4])
	}
	in.Intercept = ParseGoBench(strings.ReplaceAll(interceptSample, "1.25 ratio", "1.45 ratio"))
	if v := targetsIntercept(in)[0].Verdict; v != "**missed**" {
		t.Errorf("median 1.40x: %s, want missed", v)
	}
	if r := targetsIntercept(&Inputs{})[0]; r.Verdict != "not measured" || !strings.Contains(r.Measured, FileIntercept) {
		t.Errorf("no file: %+v", r)
	}
}
