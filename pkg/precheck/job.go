// Package precheck is the contract of a schedule's precheck script
// (DESIGN.md section 14): the job the host hands the sealed container, the
// result it reads back, and the API's request and answer. The script is a
// short JavaScript module, `export default async ({ mcp, firedAt,
// timeZone, today, schedule }) => result`, run by package precheck/runner.
//
// Guarantees: a Job or Result that passed Validate carries every bound
// (script size, grants, deadline, call budget, note and context lengths, a
// printable error text of a known kind); DecodeResult reads a container's
// answer strictly within Limits.MaxResultBytes. It imports no engine, so
// the host and clients never link one.
package precheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Bounds of a job (the host's API enforces the same ones on its request).
const (
	// MaxScriptBytes bounds a script.
	MaxScriptBytes = 64 << 10
	// MaxScheduleChars bounds the schedule text handed to the script.
	MaxScheduleChars = 512
	// MaxTimeZoneBytes bounds an IANA zone name.
	MaxTimeZoneBytes = 64
	// MaxServers and MaxToolsPerServer bound the grants of one job.
	MaxServers        = 16
	MaxToolsPerServer = 64
	// MaxCallsLimit is the highest call budget a job may carry.
	MaxCallsLimit = 256
	// MaxNoteCharsLimit and MaxContextCharsLimit are the highest result
	// bounds an operator may configure.
	MaxNoteCharsLimit    = 16_000
	MaxContextCharsLimit = 256_000
	// MaxErrorChars bounds an error result's text (a throw's message is cut
	// to fit).
	MaxErrorChars = 300
	// MaxArgsBytes bounds one MCP call's JSON arguments (the broker's
	// request bound, 256 KiB, stays the outer one).
	MaxArgsBytes = 64 << 10
	// MaxJobBytes bounds the job JSON on stdin.
	MaxJobBytes = 256 << 10
	// MinTimeoutMs and MaxTimeoutMs bound the in-container deadline.
	MinTimeoutMs = 100
	MaxTimeoutMs = 600_000
	// MinHeapBytes bounds the heap watchdog from below (the engine and its
	// runtime need room of their own).
	MinHeapBytes = 16 << 20
)

// Error kinds of a failed run (Result.Kind): fixed words the host counts
// and logs; never a payload.
const (
	KindSyntax   = "syntax"   // the script does not compile or has no default export
	KindThrow    = "throw"    // the script threw or its promise was rejected
	KindShape    = "shape"    // the answer is not {wake:false, note?} or {wake:true, context}
	KindBound    = "bound"    // the answer passed its bound
	KindTimeout  = "timeout"  // the VM was interrupted at the deadline
	KindMemory   = "memory"   // the VM was interrupted at its heap bound
	KindInternal = "internal" // the runner itself failed (a bad job)
)

var kinds = map[string]bool{KindSyntax: true, KindThrow: true, KindShape: true, KindBound: true,
	KindTimeout: true, KindMemory: true, KindInternal: true}

// ErrInvalid is the category of every job or result validation failure.
var ErrInvalid = errors.New("invalid precheck")

func bad(format string, a ...any) error {
	return fmt.Errorf("precheck: "+format+": %w", append(a, ErrInvalid)...)
}

// Server is one MCP server a job may call and the tools granted on it.
type Server struct {
	Name  string   `json:"name"`
	Tools []string `json:"tools"`
}

// Job is what the host hands the container on stdin.
type Job struct {
	Script   string `json:"script"`
	FiredAt  string `json:"firedAt"` // RFC 3339
	TimeZone string `json:"timeZone"`
	Today    string `json:"today"` // YYYY-MM-DD in TimeZone
	Schedule string `json:"schedule"`
	// Servers are the granted MCP servers and tools (may be empty: the
	// script then has no way out).
	Servers []Server `json:"servers"`
	// TimeoutMs is the VM's deadline from the runner's start; the host's
	// kill comes after it.
	TimeoutMs int `json:"timeoutMs"`
	// MaxCalls is the run's budget of mcp calls, refused ones included.
	MaxCalls int `json:"maxCalls"`
	// MaxNoteChars and MaxContextChars bound the answer's strings.
	MaxNoteChars    int `json:"maxNoteChars"`
	MaxContextChars int `json:"maxContextChars"`
	// MaxHeapBytes is the heap bound at which the VM is stopped (below the
	// container's memory limit, so the answer is a clear error, not a kill).
	MaxHeapBytes int64 `json:"maxHeapBytes"`
}

var dateRe = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)

// Validate checks every field.
func (j *Job) Validate() error {
	if j.Script == "" || len(j.Script) > MaxScriptBytes || !utf8.ValidString(j.Script) {
		return bad("script must be 1 to %d bytes of UTF-8", MaxScriptBytes)
	}
	if _, err := time.Parse(time.RFC3339, j.FiredAt); err != nil {
		return bad("firedAt must be an RFC 3339 time")
	}
	if j.TimeZone == "" || len(j.TimeZone) > MaxTimeZoneBytes || !Printable(j.TimeZone) {
		return bad("timeZone must be 1 to %d printable bytes", MaxTimeZoneBytes)
	}
	if !dateRe.MatchString(j.Today) {
		return bad("today must be YYYY-MM-DD")
	}
	if utf8.RuneCountInString(j.Schedule) > MaxScheduleChars || !utf8.ValidString(j.Schedule) {
		return bad("schedule must be at most %d characters", MaxScheduleChars)
	}
	if len(j.Servers) > MaxServers {
		return bad("at most %d servers", MaxServers)
	}
	seen := map[string]bool{}
	for _, s := range j.Servers {
		if !protocol.ValidToolName(s.Name) || seen[s.Name] {
			return bad("server names must be unique and match %s", protocol.ToolNameRule)
		}
		seen[s.Name] = true
		if len(s.Tools) == 0 || len(s.Tools) > MaxToolsPerServer {
			return bad("server %s must grant 1 to %d tools", s.Name, MaxToolsPerServer)
		}
		tools := map[string]bool{}
		for _, t := range s.Tools {
			if !protocol.ValidMCPToolName(t) || tools[t] {
				return bad("server %s: tool names must be unique and be %s", s.Name, protocol.MCPToolNameRule)
			}
			tools[t] = true
		}
	}
	switch {
	case j.TimeoutMs < MinTimeoutMs || j.TimeoutMs > MaxTimeoutMs:
		return bad("timeoutMs must be %d to %d", MinTimeoutMs, MaxTimeoutMs)
	case j.MaxCalls < 0 || j.MaxCalls > MaxCallsLimit:
		return bad("maxCalls must be 0 to %d", MaxCallsLimit)
	case j.MaxNoteChars < 1 || j.MaxNoteChars > MaxNoteCharsLimit:
		return bad("maxNoteChars must be 1 to %d", MaxNoteCharsLimit)
	case j.MaxContextChars < 1 || j.MaxContextChars > MaxContextCharsLimit:
		return bad("maxContextChars must be 1 to %d", MaxContextCharsLimit)
	case j.MaxHeapBytes < MinHeapBytes:
		return bad("maxHeapBytes must be at least %d", MinHeapBytes)
	}
	return nil
}

// Granted reports whether tool on server is granted.
func (j *Job) Granted(server, tool string) bool {
	for _, s := range j.Servers {
		if s.Name == server {
			for _, t := range s.Tools {
				if t == tool {
					return true
				}
			}
		}
	}
	return false
}

// Result is the container's answer: {wake:false, note?}, {wake:true,
// context} or {error, kind}.
type Result struct {
	Wake    bool   `json:"wake"`
	Note    string `json:"note,omitempty"`
	Context string `json:"context,omitempty"`
	Error   string `json:"error,omitempty"`
	Kind    string `json:"kind,omitempty"`
}

// Limits are a result's bounds.
type Limits struct {
	MaxNoteChars    int
	MaxContextChars int
}

// MaxResultBytes bounds the encoded result for l: every character escaped
// at its longest (\uXXXX\uXXXX for a supplementary one is 12 bytes for 4
// of UTF-8; 6 bytes for a control character) plus the framing.
func (l Limits) MaxResultBytes() int64 {
	return int64(l.MaxNoteChars+l.MaxContextChars)*6 + 4*MaxErrorChars + 1024
}

// Validate checks a result: exactly one of the three shapes, each string
// within its bound, an error's text printable and its kind known.
func (r *Result) Validate(l Limits) error {
	if r.Error != "" || r.Kind != "" {
		switch {
		case r.Error == "" || !kinds[r.Kind]:
			return bad("an error result has a text and a known kind")
		case r.Wake || r.Note != "" || r.Context != "":
			return bad("an error result carries nothing else")
		case utf8.RuneCountInString(r.Error) > MaxErrorChars || !Printable(r.Error):
			return bad("an error text is at most %d printable characters", MaxErrorChars)
		}
		return nil
	}
	if !utf8.ValidString(r.Note) || !utf8.ValidString(r.Context) {
		return bad("note and context must be UTF-8")
	}
	if r.Wake {
		switch {
		case r.Note != "":
			return bad("a waking result has a context and no note")
		case r.Context == "":
			return bad("a waking result needs a non-empty context")
		case utf8.RuneCountInString(r.Context) > l.MaxContextChars:
			return bad("context over %d characters", l.MaxContextChars)
		}
		return nil
	}
	if r.Context != "" {
		return bad("a result that does not wake has no context")
	}
	if utf8.RuneCountInString(r.Note) > l.MaxNoteChars {
		return bad("note over %d characters", l.MaxNoteChars)
	}
	return nil
}

// Today is the date of firedAt in loc, as YYYY-MM-DD.
func Today(firedAt time.Time, loc *time.Location) string {
	return firedAt.In(loc).Format(time.DateOnly)
}

func Printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// Encode is the result's wire form (one line).
func Encode(res Result) ([]byte, error) {
	data, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// DecodeResult strictly decodes and validates a container's answer of at
// most l.MaxResultBytes() bytes.
func DecodeResult(data []byte, l Limits) (Result, error) {
	if int64(len(data)) > l.MaxResultBytes() {
		return Result{}, bad("result over %d bytes", l.MaxResultBytes())
	}
	var res Result
	if err := decodeResult(data, &res); err != nil {
		return Result{}, bad("result: %v", err)
	}
	if err := res.Validate(l); err != nil {
		return Result{}, err
	}
	return res, nil
}

// decodeResult is protocol.DecodeStrict whose errors name the category
// only: encoding/json's messages quote the container's keys and
// characters, and the host logs these errors (as runs/wire does).
func decodeResult(data []byte, res *Result) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(res); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return errors.New("unknown field")
		}
		return errors.New("not one object of the known fields and types")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the object")
	}
	return nil
}

// Clean makes s printable (anything else becomes a space) and cuts it to
// at most max characters, marking a cut with an ellipsis.
func Clean(s string, max int) string {
	rs := []rune(strings.ToValidUTF8(s, "?"))
	cut := len(rs) > max
	if cut {
		rs = rs[:max-1]
	}
	for i, r := range rs {
		if !unicode.IsPrint(r) {
			rs[i] = ' '
		}
	}
	if cut {
		return string(rs) + "…"
	}
	return string(rs)
}
