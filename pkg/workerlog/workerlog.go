// Package workerlog forwards a worker's stderr to journald under its
// channel's tag, bounded per turn and host-wide.
//
// Guarantee: one turn forwards at most Limits.TurnLines lines and
// Limits.TurnBytes bytes, each line cut to Limits.LineBytes; one channel at
// most Limits.ChannelLines lines per Limits.Window across its turns; all turns
// together at most Limits.WindowLines lines per Limits.Window, below
// journald's default per-unit rate limit (10,000 messages per 30 s), so a
// flooding guest can neither silence another channel's lines nor the host's
// own. A turn whose stderr passes Limits.HardBytes gets ErrOverflow from
// Write (the caller kills its container). Every entry carries
// SYSLOG_IDENTIFIER=sandbox/<channel tag> (journalctl -t), the container name
// and the turn id; what was dropped is said in one closing line per turn.
package workerlog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

// ErrOverflow: the turn's stderr passed Limits.HardBytes.
var ErrOverflow = errors.New("worker stderr over its bound")

// Limits of the forwarding.
type Limits struct {
	TurnLines   int
	TurnBytes   int
	LineBytes   int
	HardBytes   int64
	WindowLines int
	// ChannelLines bounds one channel's lines per Window, across its turns.
	ChannelLines int
	Window       time.Duration
}

// DefaultLimits: a worker logs a few dozen short lines a turn.
func DefaultLimits() Limits {
	return Limits{TurnLines: 1000, TurnBytes: 256 << 10, LineBytes: 4 << 10, HardBytes: 8 << 20, WindowLines: 4000, ChannelLines: 1000, Window: 30 * time.Second}
}

// SendFunc writes one journal entry (journal.Send in production).
type SendFunc func(message string, priority journal.Priority, vars map[string]string) error

// Forwarder holds the host-wide budget.
type Forwarder struct {
	limits Limits
	send   SendFunc
	now    func() time.Time

	mu          sync.Mutex
	windowStart time.Time
	windowUsed  int
	channelUsed map[string]int
}

// New returns a forwarder; send nil means journal.Send, now nil time.Now.
func New(l Limits, send SendFunc, now func() time.Time) *Forwarder {
	if send == nil {
		send = journal.Send
	}
	if now == nil {
		now = time.Now
	}
	return &Forwarder{limits: l, send: send, now: now}
}

// take reserves one line of the host-wide window and of the channel's share.
func (f *Forwarder) take(tag string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.now(); now.Sub(f.windowStart) >= f.limits.Window || f.channelUsed == nil {
		f.windowStart, f.windowUsed, f.channelUsed = now, 0, map[string]int{}
	}
	if f.windowUsed >= f.limits.WindowLines || f.channelUsed[tag] >= f.limits.ChannelLines {
		return false
	}
	f.windowUsed++
	f.channelUsed[tag]++
	return true
}

// Turn starts one turn's sink. tag is the channel tag (ids.ChannelTag).
func (f *Forwarder) Turn(tag, turnID, container string) *Sink {
	return &Sink{f: f, tag: tag, vars: map[string]string{
		"SYSLOG_IDENTIFIER": "sandbox/" + tag,
		"CONTAINER_NAME":    container,
		"SANDBOX_TURN":      turnID,
	}}
}

// Sink receives one turn's stderr.
type Sink struct {
	f    *Forwarder
	tag  string
	vars map[string]string

	// mu: a caller that gave up on a run (its context ended) may Close
	// while the copy still delivers a last Write.
	mu     sync.Mutex
	closed bool

	partial   []byte
	cut       bool // the partial line passed LineBytes; its rest is dropped
	total     int64
	lines     int
	bytes     int
	dropped   int
	truncated int
	sendErr   error
}

// Write splits p into lines and forwards what the bounds allow. It returns
// ErrOverflow once the turn's stderr passed HardBytes.
// Everything else counts as written: what is not forwarded is dropped on
// purpose (io.Writer's contract).
func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	if s.closed {
		return n, nil
	}
	s.total += int64(n)
	if s.total > s.f.limits.HardBytes {
		return 0, ErrOverflow
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := s.f.limits.LineBytes - len(s.partial); len(chunk) > room {
			if room > 0 {
				s.partial = append(s.partial, chunk[:room]...)
			}
			s.cut = true
		} else if !s.cut {
			s.partial = append(s.partial, chunk...)
		}
		if i < 0 {
			break
		}
		s.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (s *Sink) flush() {
	line := string(s.partial)
	cut := s.cut
	s.partial, s.cut = s.partial[:0], false
	if line == "" && !cut {
		return
	}
	l := s.f.limits
	if s.lines >= l.TurnLines || s.bytes+len(line) > l.TurnBytes || !s.f.take(s.tag) {
		s.dropped++
		return
	}
	s.lines++
	s.bytes += len(line)
	if cut {
		s.truncated++
		line += " [cut]"
	}
	if err := s.f.send(line, priority(line), s.vars); err != nil && s.sendErr == nil {
		s.sendErr = err
	}
}

// priority follows the slog level of a JSON log line, info otherwise, and
// never above warning: the line is the guest's to write, so an "ERROR" it
// claims must not reach `journalctl -p err` or alerting built on it.
func priority(line string) journal.Priority {
	switch {
	case strings.Contains(line, `"level":"ERROR"`), strings.Contains(line, `"level":"WARN"`):
		return journal.PriWarning
	case strings.Contains(line, `"level":"DEBUG"`):
		return journal.PriDebug
	}
	return journal.PriInfo
}

// Stats is what a closed sink forwarded and dropped.
type Stats struct {
	Lines, Dropped, Truncated int
	Bytes                     int
	Total                     int64
	SendErr                   error
}

// Close forwards a last unterminated line and, when lines were dropped or
// cut, one closing line saying so (outside the turn's budget, not the
// window's: it is the host's own account).
func (s *Sink) Close() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Stats{Lines: s.lines, Dropped: s.dropped, Truncated: s.truncated, Bytes: s.bytes, Total: s.total, SendErr: s.sendErr}
	}
	s.closed = true
	s.flush()
	if s.dropped > 0 || s.truncated > 0 {
		msg := fmt.Sprintf("sandbox: %d worker log lines over this turn's bound were dropped, %d cut to %d bytes", s.dropped, s.truncated, s.f.limits.LineBytes)
		if err := s.f.send(msg, journal.PriWarning, s.vars); err != nil && s.sendErr == nil {
			s.sendErr = err
		}
	}
	return Stats{Lines: s.lines, Dropped: s.dropped, Truncated: s.truncated, Bytes: s.bytes, Total: s.total, SendErr: s.sendErr}
}
