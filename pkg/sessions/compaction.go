package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Bounds of the compactor protocol (besides the request's byte bound, the
// operator's maxRequestBytes, 32 MiB by default).
const (
	// MaxSummaryBytes bounds a compaction's summary.
	MaxSummaryBytes = 1 << 20
	// MaxDetailsBytes bounds a compaction's details object.
	MaxDetailsBytes = 64 << 10
	// MaxAnswerBytes bounds what a compactor may answer.
	MaxAnswerBytes = MaxSummaryBytes*2 + MaxDetailsBytes + 4096
	// MaxFiles bounds readFiles and modifiedFiles, MaxPathBytes each entry.
	MaxFiles     = 10_000
	MaxPathBytes = 4096
)

// Compaction reasons of a request (the seed's).
const (
	ReasonThreshold = "threshold"
	ReasonOverflow  = "overflow"
	ReasonManual    = "manual"
)

// CompactRequest is what the worker asks the host compactor to summarize
// (the seed's PiCompactRequest). Messages are Anthropic-shaped message
// objects ({"role": ..., "content": ...}) as raw JSON.
type CompactRequest struct {
	Reason              string            `json:"reason"`
	TokensBefore        int               `json:"tokensBefore"`
	FirstKeptEntryID    string            `json:"firstKeptEntryId"`
	IsSplitTurn         bool              `json:"isSplitTurn"`
	MessagesToSummarize []json.RawMessage `json:"messagesToSummarize"`
	TurnPrefixMessages  []json.RawMessage `json:"turnPrefixMessages"`
	KeptMessages        []json.RawMessage `json:"keptMessages"`
	PreviousSummary     *string           `json:"previousSummary,omitempty"`
	CustomInstructions  *string           `json:"customInstructions,omitempty"`
	ReadFiles           []string          `json:"readFiles"`
	ModifiedFiles       []string          `json:"modifiedFiles"`
}

// Compaction is a compactor's result (the seed's PiCompaction): the summary
// replacing every message before FirstKeptEntryID (the request's), the
// request's TokensBefore, an optional estimate after, and details (an
// object; the broker sets details.engine).
type Compaction struct {
	Summary              string                     `json:"summary"`
	FirstKeptEntryID     string                     `json:"firstKeptEntryId"`
	TokensBefore         int                        `json:"tokensBefore"`
	EstimatedTokensAfter *int                       `json:"estimatedTokensAfter,omitempty"`
	Details              map[string]json.RawMessage `json:"details,omitempty"`
}

// Engine is details.engine ("" when absent or not a string).
func (c *Compaction) Engine() string {
	var s string
	if raw, ok := c.Details["engine"]; ok && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// Record is the session entry's compaction for a context of tokensAfter
// tokens after it.
func (c *Compaction) Record(tokensAfter int) *CompactionRecord {
	return &CompactionRecord{Summary: c.Summary, FirstKeptEntryID: c.FirstKeptEntryID, TokensBefore: c.TokensBefore, TokensAfter: tokensAfter, Engine: c.Engine()}
}

// Fallback reasons: why a compaction falls back to the worker's own
// summary. The broker answers one of these instead of a Compaction.
const (
	FallbackUndefined  = "undefined"   // the compactor answered nothing or null
	FallbackError      = "error"       // it failed (non-zero exit, non-2xx, transport)
	FallbackShape      = "shape"       // its answer is not a valid Compaction for the request
	FallbackTimeout    = "timeout"     // it outlasted its timeout or half the turn's remaining time
	FallbackTooLarge   = "too-large"   // the request is over maxRequestBytes
	FallbackBudget     = "budget"      // the turn's MaxHostCompactions are spent
	FallbackBusy       = "busy"        // a previous compactor still runs
	FallbackNoTime     = "no-time"     // the turn has too little time left to ask
	FallbackBadRequest = "bad-request" // the request is not a valid CompactRequest
)

// CompactAnswer is the broker's answer to POST /compact: exactly one of
// Compaction and Fallback.
type CompactAnswer struct {
	Compaction *Compaction `json:"compaction,omitempty"`
	Fallback   string      `json:"fallback,omitempty"`
}

// decodeStrict decodes exactly one JSON value of valid UTF-8 into v with no
// unknown field.
func decodeStrict(data []byte, v any) error {
	if !utf8.Valid(data) {
		return errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New(jsonReason(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

// ParseCompactRequest decodes and checks a request body.
func ParseCompactRequest(body []byte) (*CompactRequest, error) {
	var r CompactRequest
	if err := decodeStrict(body, &r); err != nil {
		return nil, fmt.Errorf("sessions: compact request: %v: %w", err, ErrInvalid)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	// Lists absent or null are empty: a compactor always gets arrays.
	for _, l := range []*[]json.RawMessage{&r.MessagesToSummarize, &r.TurnPrefixMessages, &r.KeptMessages} {
		if *l == nil {
			*l = []json.RawMessage{}
		}
	}
	for _, l := range []*[]string{&r.ReadFiles, &r.ModifiedFiles} {
		if *l == nil {
			*l = []string{}
		}
	}
	return &r, nil
}

// Validate checks a request's shape and bounds.
func (r *CompactRequest) Validate() error {
	bad := func(msg string) error { return fmt.Errorf("sessions: compact request: %s: %w", msg, ErrInvalid) }
	switch r.Reason {
	case ReasonThreshold, ReasonOverflow, ReasonManual:
	default:
		return bad("reason must be threshold, overflow or manual")
	}
	if r.TokensBefore < 0 || len(r.FirstKeptEntryID) > MaxIDBytes {
		return bad("tokensBefore must not be negative and firstKeptEntryId at most 64 bytes")
	}
	for _, list := range [][]json.RawMessage{r.MessagesToSummarize, r.TurnPrefixMessages, r.KeptMessages} {
		for _, m := range list {
			if !isKind(m, '{') {
				return bad("every message must be a JSON object")
			}
		}
	}
	for _, list := range [][]string{r.ReadFiles, r.ModifiedFiles} {
		if len(list) > MaxFiles {
			return bad("too many file names")
		}
		for _, f := range list {
			if f == "" || len(f) > MaxPathBytes {
				return bad("file names must be 1 to 4096 bytes")
			}
		}
	}
	return nil
}

// ParseCompaction reads a compactor's answer to req. nil, nil means the
// compactor answered nothing or JSON null (FallbackUndefined); an error
// means the answer is out of shape (FallbackShape): not exactly one object
// of the known fields, a summary empty or over MaxSummaryBytes, details
// over MaxDetailsBytes, or firstKeptEntryId or tokensBefore other than the
// request's.
func ParseCompaction(answer []byte, req *CompactRequest) (*Compaction, error) {
	t := bytes.TrimSpace(answer)
	if len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	if len(t) > MaxAnswerBytes {
		return nil, errors.New("answer over its bound")
	}
	var c Compaction
	if err := decodeStrict(t, &c); err != nil {
		return nil, fmt.Errorf("answer: %v", err)
	}
	if t[0] != '{' {
		return nil, errors.New("answer is not an object")
	}
	if c.Summary == "" || len(c.Summary) > MaxSummaryBytes {
		return nil, errors.New("summary empty or over its bound")
	}
	if c.FirstKeptEntryID != req.FirstKeptEntryID || c.TokensBefore != req.TokensBefore {
		return nil, errors.New("firstKeptEntryId or tokensBefore differ from the request's")
	}
	if c.EstimatedTokensAfter != nil && *c.EstimatedTokensAfter < 0 {
		return nil, errors.New("estimatedTokensAfter negative")
	}
	if c.Details != nil {
		d, _ := json.Marshal(c.Details)
		if len(d) > MaxDetailsBytes {
			return nil, errors.New("details over their bound")
		}
	}
	return &c, nil
}

// Report is what the worker tells the host after a compaction or a failed
// one (POST /compact/report), for the host's log: numbers and names only.
type Report struct {
	// Event is EventCompacted or EventFailed.
	Event string `json:"event"`
	// Trigger is TriggerThreshold, TriggerCeiling or TriggerOverflow.
	Trigger string `json:"trigger"`
	// Engine is the host compactor's engine or EngineWorker.
	Engine       string `json:"engine"`
	TokensBefore int    `json:"tokensBefore"`
	TokensAfter  int    `json:"tokensAfter"`
	// ContextAfter is the context the tiers measure after it, system
	// prompt and tools included.
	ContextAfter     int `json:"contextAfter"`
	NextCompactionAt int `json:"nextCompactionAt"`
	// Fallback is why the host compactor was not used ("" when it was).
	Fallback string `json:"fallback,omitempty"`
}

// Report events.
const (
	EventCompacted = "compacted"
	EventFailed    = "failed"
)

// ParseReport decodes and checks a report.
func ParseReport(body []byte) (*Report, error) {
	var r Report
	if err := decodeStrict(body, &r); err != nil {
		return nil, fmt.Errorf("sessions: report: %v: %w", err, ErrInvalid)
	}
	ok := (r.Event == EventCompacted || r.Event == EventFailed) &&
		(r.Trigger == TriggerThreshold || r.Trigger == TriggerCeiling || r.Trigger == TriggerOverflow) &&
		validName(r.Engine) && (r.Fallback == "" || validName(r.Fallback)) &&
		r.TokensBefore >= 0 && r.TokensAfter >= 0 && r.ContextAfter >= 0 && r.NextCompactionAt >= 0
	if !ok {
		return nil, fmt.Errorf("sessions: report out of shape: %w", ErrInvalid)
	}
	return &r, nil
}

// validName: 1..64 bytes of [a-z0-9_.-], safe to log.
func validName(s string) bool {
	if s == "" || len(s) > MaxIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}
