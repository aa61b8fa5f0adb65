// Package promtext reads histograms out of the Prometheus text exposition
// format (what the host serves at GET /metrics), subtracts two snapshots and
// estimates quantiles from bucket counts the way histogram_quantile does. Only
// what the benchmark needs: histogram _bucket/_sum/_count series; everything
// else in the text is ignored.
package promtext

import (
	"bufio"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Histogram is one histogram series (a family name plus a label set).
type Histogram struct {
	Name   string            // family name, without _bucket/_sum/_count
	Labels map[string]string // without "le"
	Bounds []float64         // upper bounds, ascending, +Inf last
	Counts []float64         // cumulative counts per bound
	Sum    float64
	Count  float64
}

// Key identifies a series: name{k="v",...} with sorted labels.
func (h *Histogram) Key() string { return key(h.Name, h.Labels) }

func key(name string, labels map[string]string) string {
	ks := make([]string, 0, len(labels))
	for k := range labels {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	b.WriteString(name)
	if len(ks) > 0 {
		b.WriteByte('{')
		for i, k := range ks {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%q", k, labels[k])
		}
		b.WriteByte('}')
	}
	return b.String()
}

// Parse returns every histogram series in text, keyed by Key().
func Parse(text string) (map[string]*Histogram, error) {
	types := map[string]string{}
	out := map[string]*Histogram{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[1] == "TYPE" {
				types[f[2]] = f[3]
			}
			continue
		}
		name, labels, value, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		var fam, part string
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(name, suf) && types[strings.TrimSuffix(name, suf)] == "histogram" {
				fam, part = strings.TrimSuffix(name, suf), suf
			}
		}
		if fam == "" {
			continue
		}
		le, hasLE := labels["le"]
		delete(labels, "le")
		k := key(fam, labels)
		h := out[k]
		if h == nil {
			h = &Histogram{Name: fam, Labels: labels}
			out[k] = h
		}
		switch part {
		case "_sum":
			h.Sum = value
		case "_count":
			h.Count = value
		case "_bucket":
			if !hasLE {
				return nil, fmt.Errorf("promtext: bucket without le: %q", line)
			}
			b, err := parseFloat(le)
			if err != nil {
				return nil, fmt.Errorf("promtext: bad le in %q", line)
			}
			h.Bounds = append(h.Bounds, b)
			h.Counts = append(h.Counts, value)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, h := range out {
		sort.Sort(byBound{h})
	}
	return out, nil
}

type byBound struct{ h *Histogram }

func (b byBound) Len() int           { return len(b.h.Bounds) }
func (b byBound) Less(i, j int) bool { return b.h.Bounds[i] < b.h.Bounds[j] }
func (b byBound) Swap(i, j int) {
	b.h.Bounds[i], b.h.Bounds[j] = b.h.Bounds[j], b.h.Bounds[i]
	b.h.Counts[i], b.h.Counts[j] = b.h.Counts[j], b.h.Counts[i]
}

func parseFloat(s string) (float64, error) {
	switch s {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// parseSample splits `name{a="b",c="d"} value [timestamp]`.
func parseSample(line string) (string, map[string]string, float64, error) {
	labels := map[string]string{}
	var name, rest string
	if i := strings.IndexByte(line, '{'); i >= 0 {
		name = line[:i]
		j := i + 1
		for {
			for j < len(line) && (line[j] == ' ' || line[j] == ',') {
				j++
			}
			if j >= len(line) {
				return "", nil, 0, fmt.Errorf("promtext: unterminated labels: %q", line)
			}
			if line[j] == '}' {
				j++
				break
			}
			eq := strings.IndexByte(line[j:], '=')
			if eq < 0 || j+eq+1 >= len(line) || line[j+eq+1] != '"' {
				return "", nil, 0, fmt.Errorf("promtext: bad label in %q", line)
			}
			lname := line[j : j+eq]
			k := j + eq + 2
			var val strings.Builder
			for ; k < len(line) && line[k] != '"'; k++ {
				if line[k] == '\\' && k+1 < len(line) {
					k++
					switch line[k] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[k])
					}
					continue
				}
				val.WriteByte(line[k])
			}
			if k >= len(line) {
				return "", nil, 0, fmt.Errorf("promtext: unterminated label value in %q", line)
			}
			labels[lname] = val.String()
			j = k + 1
		}
		rest = line[j:]
	} else {
		sp := strings.IndexAny(line, " \t")
		if sp < 0 {
			return "", nil, 0, fmt.Errorf("promtext: no value in %q", line)
		}
		name, rest = line[:sp], line[sp:]
	}
	f := strings.Fields(rest)
	if len(f) < 1 {
		return "", nil, 0, fmt.Errorf("promtext: no value in %q", line)
	}
	v, err := parseFloat(f[0])
	if err != nil {
		return "", nil, 0, fmt.Errorf("promtext: bad value in %q", line)
	}
	return name, labels, v, nil
}

// Delta is after minus before, series by series; a series absent before
// counts from zero. Series whose count did not grow are left out.
func Delta(before, after map[string]*Histogram) map[string]*Histogram {
	out := map[string]*Histogram{}
	for k, a := range after {
		d := &Histogram{Name: a.Name, Labels: a.Labels, Bounds: a.Bounds, Counts: append([]float64(nil), a.Counts...), Sum: a.Sum, Count: a.Count}
		if b := before[k]; b != nil && len(b.Counts) == len(a.Counts) {
			for i := range d.Counts {
				d.Counts[i] -= b.Counts[i]
			}
			d.Sum -= b.Sum
			d.Count -= b.Count
		}
		if d.Count > 0 {
			out[k] = d
		}
	}
	return out
}

// Mean is Sum/Count (NaN when empty).
func (h *Histogram) Mean() float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	return h.Sum / h.Count
}

// Quantile estimates the q-quantile by linear interpolation inside the bucket
// that holds it (as Prometheus' histogram_quantile). A quantile in the +Inf
// bucket returns the highest finite bound.
func (h *Histogram) Quantile(q float64) float64 {
	if len(h.Counts) == 0 || h.Counts[len(h.Counts)-1] == 0 {
		return math.NaN()
	}
	total := h.Counts[len(h.Counts)-1]
	rank := q * total
	for i, c := range h.Counts {
		if c >= rank {
			if math.IsInf(h.Bounds[i], 1) {
				if i == 0 {
					return math.NaN()
				}
				return h.Bounds[i-1]
			}
			lo, prev := 0.0, 0.0
			if i > 0 {
				lo, prev = h.Bounds[i-1], h.Counts[i-1]
			}
			if c == prev {
				return h.Bounds[i]
			}
			return lo + (h.Bounds[i]-lo)*(rank-prev)/(c-prev)
		}
	}
	return h.Bounds[len(h.Bounds)-1]
}
