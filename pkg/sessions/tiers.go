package sessions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
)

// The seed's compaction tiers and per-turn budgets.
const (
	// DefaultThreshold: a model whose window leaves more than this many
	// tokens compacts here, through the host compactor.
	DefaultThreshold = 300_000
	// DefaultCeiling: past this, the worker's own summary compacts
	// without asking the host.
	DefaultCeiling = 500_000
	// RepeatMargin: a compaction that left the context within this many
	// tokens of the threshold moves the next one to the ceiling, so it
	// does not repeat on the next request.
	RepeatMargin = 50_000
	// MaxHostCompactions is how many compactions one turn may ask the
	// host for; later ones fall back to the worker's own summary.
	MaxHostCompactions = 3
	// MaxReports is how many compaction reports one turn may send the
	// host; later ones are refused (the worker's own log keeps them).
	MaxReports = 16
	// ImageTokens is the estimate of one image block (Anthropic's
	// largest image costs about 1,600 tokens).
	ImageTokens = 1600
)

// Tiers are the context sizes (tokens) at which a session compacts.
type Tiers struct {
	Threshold int `json:"threshold"`
	Ceiling   int `json:"ceiling"`
}

// TiersFor are the tiers for a model whose context window is window
// tokens, reserve of which are kept for the answer: the seed's 300,000 and
// 500,000 when the window leaves more than 300,000; otherwise a single tier
// at what it leaves (both fields equal: the host compactor first, the
// worker's own summary past it).
func TiersFor(window, reserve int) Tiers {
	usable := window - reserve
	if usable > DefaultThreshold {
		return Tiers{Threshold: DefaultThreshold, Ceiling: min(DefaultCeiling, usable)}
	}
	return Tiers{Threshold: max(usable, 1), Ceiling: max(usable, 1)}
}

// Validate checks 0 < Threshold <= Ceiling.
func (t Tiers) Validate() error {
	if t.Threshold <= 0 || t.Ceiling < t.Threshold {
		return fmt.Errorf("sessions: tiers need 0 < threshold (%d) <= ceiling (%d)", t.Threshold, t.Ceiling)
	}
	return nil
}

// NextAt is where the next compaction triggers after last (nil: none
// yet): the threshold, or the ceiling when last left the context within
// RepeatMargin tokens of the threshold.
func (t Tiers) NextAt(last *CompactionRecord) int {
	if last != nil && t.Threshold-last.TokensAfter <= RepeatMargin {
		return t.Ceiling
	}
	return t.Threshold
}

// Action is what the tiers ask for before a model request.
type Action int

// Actions.
const (
	// None: the context is below the next compaction point.
	None Action = iota
	// Host: compact through the host compactor (POST /compact), falling
	// back to the worker's own summary.
	Host
	// Worker: past the ceiling; the worker's own summary, no host call.
	Worker
)

func (a Action) String() string {
	switch a {
	case Host:
		return "host"
	case Worker:
		return "worker"
	}
	return "none"
}

// Trigger names for logs and reports.
const (
	TriggerThreshold = "threshold"
	TriggerCeiling   = "ceiling"
	// TriggerOverflow: the model refused the request as too long.
	TriggerOverflow = "overflow"
)

// Decide says what a context of tokens needs, given the session's last
// compaction (nil: none).
func (t Tiers) Decide(tokens int, last *CompactionRecord) Action {
	switch {
	case tokens > t.Ceiling:
		return Worker
	case tokens >= t.NextAt(last):
		return Host
	}
	return None
}

// Budget is one turn's compaction budget: MaxHostCompactions host requests
// and MaxReports reports. The worker and the broker each keep one per
// turn. Safe for concurrent use.
type Budget struct {
	mu       sync.Mutex
	requests int
	reports  int
}

// TakeRequest spends one host compaction request; false when spent.
func (b *Budget) TakeRequest() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.requests >= MaxHostCompactions {
		return false
	}
	b.requests++
	return true
}

// TakeReport spends one report; false when spent.
func (b *Budget) TakeReport() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reports >= MaxReports {
		return false
	}
	b.reports++
	return true
}

// EstimateTokens is the documented estimate of text or JSON: one token per
// four bytes, rounded up. Used only where the model has not reported usage.
func EstimateTokens(b []byte) int { return (len(b) + 3) / 4 }

// EstimateEntry estimates one entry's tokens: EstimateTokens of its
// content, with each image block counted as ImageTokens instead of its
// base64 bytes.
func EstimateEntry(e Entry) int {
	c := bytes.TrimSpace(e.Content)
	if len(c) == 0 {
		if e.Compaction != nil {
			return EstimateTokens([]byte(e.Compaction.Summary))
		}
		return 0
	}
	if c[0] != '[' {
		return EstimateTokens(c)
	}
	var blocks []json.RawMessage
	if json.Unmarshal(c, &blocks) != nil {
		return EstimateTokens(c)
	}
	n := 0
	for _, b := range blocks {
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &head) == nil && head.Type == "image" {
			n += ImageTokens
			continue
		}
		n += EstimateTokens(b)
	}
	return n
}

// Tokens is the context's size as the tiers measure it, without the system
// prompt and tools (the caller adds their EstimateTokens): the usage the
// model reported for the last assistant message, plus the estimate of the
// messages after it; with no usage since the last compaction, the estimate
// of the summary and every message.
func (c Context) Tokens() int {
	for i := len(c.Messages) - 1; i >= c.Kept; i-- {
		if u := c.Messages[i].Usage; u != nil && c.Messages[i].Type == TypeAssistant {
			n := u.Total()
			for _, e := range c.Messages[i+1:] {
				n += EstimateEntry(e)
			}
			return n
		}
	}
	n := EstimateTokens([]byte(c.Summary))
	for _, e := range c.Messages {
		n += EstimateEntry(e)
	}
	return n
}
