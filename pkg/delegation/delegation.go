// Package delegation is scoped delegation's domain (DESIGN.md section 14):
// the seed's limits and refusal texts, the job records with their bounded
// reports and scrubbed, bounded failure diagnostics, the bound on a
// channel's unfinished jobs, and per channel the stream of finished jobs a
// frontend collects to post their reports.
// Guarantee: a channel never has more than Limits.MaxRunning unfinished
// jobs; a finished job's report is at most MaxReportChars characters and its
// diagnostic at most DiagnosticChars characters of generic text with
// credential-shaped strings redacted; a finished job stays pending for a
// viewer (a client uid) until a stream of that viewer delivered it, and
// pending jobs come in finish order. Jobs are process-local.
package delegation

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits are a host's delegation bounds (config delegation.*).
type Limits struct {
	MaxRunning      int
	Timeout         time.Duration
	MaxTitleChars   int
	MaxTaskChars    int
	MaxReportChars  int
	DiagnosticChars int
}

// DefaultLimits are the seed's: two jobs per channel, ten minutes, 200 title,
// 4,000 task, 80,000 report and 600 diagnostic characters.
func DefaultLimits() Limits {
	return Limits{MaxRunning: 2, Timeout: 10 * time.Minute, MaxTitleChars: 200, MaxTaskChars: 4000, MaxReportChars: 80000, DiagnosticChars: 600}
}

// MaxAuthorChars bounds author.id, author.name and author.principalId (as a
// turn's speaker fields).
const MaxAuthorChars = 256

// Error categories; the API maps them to statuses.
var (
	// ErrRefused: the request broke one of the limits (400).
	ErrRefused = errors.New("delegation refused")
	// ErrBusy: the channel has MaxRunning unfinished jobs (429).
	ErrBusy = errors.New("too many delegated tasks running")
	// ErrNotFound: no such job, or not the caller's.
	ErrNotFound = errors.New("no such job")
	// ErrState: the job is not in a state that allows this.
	ErrState = errors.New("job state")
)

// Refusal is a refusal whose text the caller sees as it is.
type Refusal struct {
	kind error
	text string
}

func (r *Refusal) Error() string { return r.text }
func (r *Refusal) Unwrap() error { return r.kind }

func refused(format string, a ...any) error {
	return &Refusal{ErrRefused, fmt.Sprintf(format, a...)}
}

// The seed's refusal texts, word for word.
const (
	TextRequired = "title and task are required"
	// TextTimeout is a job's diagnostic after its deadline.
	TextTimeout = "the worker ran out of time"
)

// TaskTooLong is the seed's refusal of a task over the bound.
func TaskTooLong(n, max int) error {
	return refused("the task is %d characters; keep it within %d", n, max)
}

// TitleTooLong refuses a title over the bound, in the seed's words.
func TitleTooLong(n, max int) error {
	return refused("the title is %d characters; keep it within %d", n, max)
}

// Busy is the seed's refusal of a job over the channel's bound.
func Busy(n int) error {
	return &Refusal{ErrBusy, fmt.Sprintf("this channel already has %d delegated tasks running; wait for one to report back", n)}
}

// Author is the host-bound author of a job, as the frontend binds a turn's
// speaker. PrincipalID selects the model credential, as a turn's; it is
// never shown.
type Author struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	PrincipalID string `json:"principalId,omitempty"`
}

// Request is what a frontend asks to delegate.
type Request struct {
	Title  string `json:"title"`
	Task   string `json:"task"`
	Author Author `json:"author"`
}

// Check applies the limits to a request, in the seed's order: both
// present, the task's length, then the title's; then the author's fields.
// Characters are Unicode code points.
func (l Limits) Check(r Request) error {
	for _, f := range []struct{ name, v string }{{"title", r.Title}, {"task", r.Task}} {
		if !utf8.ValidString(f.v) {
			return refused("%s must be valid UTF-8", f.name)
		}
	}
	if strings.TrimSpace(r.Title) == "" || strings.TrimSpace(r.Task) == "" {
		return refused(TextRequired)
	}
	if n := utf8.RuneCountInString(r.Task); n > l.MaxTaskChars {
		return TaskTooLong(n, l.MaxTaskChars)
	}
	if n := utf8.RuneCountInString(r.Title); n > l.MaxTitleChars {
		return TitleTooLong(n, l.MaxTitleChars)
	}
	if r.Author.ID == "" {
		return refused("author.id is required")
	}
	for _, f := range []struct{ name, v string }{{"author.id", r.Author.ID}, {"author.name", r.Author.Name}, {"author.principalId", r.Author.PrincipalID}} {
		if !utf8.ValidString(f.v) || utf8.RuneCountInString(f.v) > MaxAuthorChars {
			return refused("%s must be valid UTF-8 of at most %d characters", f.name, MaxAuthorChars)
		}
	}
	return nil
}

// BoundReport cuts a report to max characters; cut says whether it did.
func BoundReport(s string, max int) (report string, cut bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return cutRunes(s, max)
}

func cutRunes(s string, max int) (string, bool) {
	if max < 0 {
		max = 0
	}
	if utf8.RuneCountInString(s) <= max {
		return s, false
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i], true
		}
		n++
	}
	return s, false
}
