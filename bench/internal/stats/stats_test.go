package stats

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"median odd", []float64{3, 1, 2}, 0.5, 2},
		{"median even interpolates", []float64{4, 1, 3, 2}, 0.5, 2.5},
		{"p95 of 1..21", seq(21), 0.95, 20},
		{"p95 interpolates", seq(10), 0.95, 9.55},
		{"min", []float64{5, 4}, 0, 4},
		{"max", []float64{5, 4}, 1, 5},
		{"single", []float64{7}, 0.95, 7},
	}
	for _, tt := range tests {
		got := Quantile(tt.xs, tt.q)
		if math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: Quantile(%v, %v) = %v, want %v", tt.name, tt.xs, tt.q, got, tt.want)
		}
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Quantile(nil) = %v, want NaN", got)
	}
}

func TestSummarizeKeepsInputOrder(t *testing.T) {
	xs := []float64{3, 1, 2}
	s := Summarize(xs)
	if s.N != 3 || s.Min != 1 || s.Max != 3 || s.Median != 2 || s.Mean != 2 {
		t.Errorf("Summarize = %+v, want n=3 min=1 max=3 median=2 mean=2", s)
	}
	if xs[0] != 3 || xs[1] != 1 {
		t.Errorf("Summarize reordered its input: %v", xs)
	}
	if got := Summarize(nil); got.N != 0 {
		t.Errorf("Summarize(nil).N = %d, want 0", got.N)
	}
}

func TestRatio(t *testing.T) {
	if got := Ratio(1, 4); got != 0.25 {
		t.Errorf("Ratio(1,4) = %v, want 0.25", got)
	}
	if got := Ratio(1, 0); !math.IsNaN(got) {
		t.Errorf("Ratio(1,0) = %v, want NaN", got)
	}
}

func seq(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	return xs
}
