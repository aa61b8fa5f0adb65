// Package stats summarises benchmark samples: order statistics computed on a
// sorted copy, so callers keep their raw samples in run order for the report.
package stats

import (
	"math"
	"sort"
	"time"
)

// Summary describes one series of durations, in milliseconds.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"minMs"`
	Median float64 `json:"medianMs"`
	P95    float64 `json:"p95Ms"`
	Max    float64 `json:"maxMs"`
	Mean   float64 `json:"meanMs"`
}

// Ms converts a duration to float milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Quantile returns the q-quantile (0..1) of xs by linear interpolation between
// closest ranks (the method most tools call "type 7"). xs need not be sorted.
// It returns NaN for an empty series.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return quantileSorted(s, q)
}

func quantileSorted(s []float64, q float64) float64 {
	if q <= 0 {
		return s[0]
	}
	if q >= 1 {
		return s[len(s)-1]
	}
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	frac := pos - float64(lo)
	return s[lo] + (s[hi]-s[lo])*frac
}

// Summarize computes a Summary of xs (milliseconds).
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Summary{
		N:      len(s),
		Min:    s[0],
		Median: quantileSorted(s, 0.5),
		P95:    quantileSorted(s, 0.95),
		Max:    s[len(s)-1],
		Mean:   sum / float64(len(s)),
	}
}

// Ratio is a/b, or NaN when b is zero.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}
