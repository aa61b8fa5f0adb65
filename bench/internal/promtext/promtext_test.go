package promtext

import (
	"math"
	"testing"
)

const before = `# HELP sandbox_turn_phase_seconds Turn phase durations.
# TYPE sandbox_turn_phase_seconds histogram
sandbox_turn_phase_seconds_bucket{phase="create",le="0.01"} 1
sandbox_turn_phase_seconds_bucket{phase="create",le="0.02"} 2
sandbox_turn_phase_seconds_bucket{phase="create",le="+Inf"} 2
sandbox_turn_phase_seconds_sum{phase="create"} 0.025
sandbox_turn_phase_seconds_count{phase="create"} 2
# TYPE sandbox_turns_total counter
sandbox_turns_total{result="ok"} 2
`

const after = `# TYPE sandbox_turn_phase_seconds histogram
sandbox_turn_phase_seconds_bucket{le="0.01",phase="create"} 3
sandbox_turn_phase_seconds_bucket{le="0.02",phase="create"} 6
sandbox_turn_phase_seconds_bucket{le="+Inf",phase="create"} 6
sandbox_turn_phase_seconds_sum{phase="create"} 0.085
sandbox_turn_phase_seconds_count{phase="create"} 6
sandbox_turn_phase_seconds_bucket{phase="start",le="0.1"} 1
sandbox_turn_phase_seconds_bucket{phase="start",le="+Inf"} 1
sandbox_turn_phase_seconds_sum{phase="start"} 0.05
sandbox_turn_phase_seconds_count{phase="start"} 1
`

func TestParseDeltaQuantile(t *testing.T) {
	b, err := Parse(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Parse(after)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 1 {
		t.Fatalf("before: %d histograms, want 1 (counters ignored)", len(b))
	}
	d := Delta(b, a)
	c := d[`sandbox_turn_phase_seconds{phase="create"}`]
	if c == nil {
		t.Fatalf("delta lacks create: %v", d)
	}
	if c.Count != 4 || math.Abs(c.Sum-0.06) > 1e-9 || math.Abs(c.Mean()-0.015) > 1e-9 {
		t.Errorf("create delta count=%v sum=%v mean=%v, want 4, 0.06, 0.015", c.Count, c.Sum, c.Mean())
	}
	// Delta buckets: le 0.01 -> 2, le 0.02 -> 4. Median rank 2 sits at 0.01.
	if got := c.Quantile(0.5); math.Abs(got-0.01) > 1e-9 {
		t.Errorf("median = %v, want 0.01", got)
	}
	if got := c.Quantile(0.75); math.Abs(got-0.015) > 1e-9 {
		t.Errorf("p75 = %v, want 0.015", got)
	}
	s := d[`sandbox_turn_phase_seconds{phase="start"}`]
	if s == nil || s.Count != 1 {
		t.Fatalf("start missing from delta (absent before counts from zero): %v", d)
	}
	if got := s.Quantile(0.5); math.Abs(got-0.05) > 1e-9 {
		t.Errorf("start median = %v, want 0.05", got)
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, in := range []string{
		"# TYPE h histogram\nh_bucket{le=\"0.1\" 1\n",
		"# TYPE h histogram\nh_bucket{le=\"x\"} 1\n",
		"# TYPE h histogram\nh_sum{} abc\n",
	} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", in)
		}
	}
}
