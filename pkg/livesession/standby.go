package livesession

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// A ready standby (docs/sessions.md "Standby"; sessions.standby): as a
// sealed turn's standby (pkg/standby), the kind may keep one session
// container prepared for nobody (created, started, attached, its
// supervisor waiting), which the next plain create (no project, no
// network, the default memory) takes instead of waiting for Docker.
//
//   - It is a session in every bound: it goes through the host's Admit and
//     reserve like one, so it holds a sessions.maxLive slot, its guest uid
//     slot and sessions.memoryMb of sessions.maxMemoryMb, and never a turn's
//     slot (sessions take none). It is nobody's (no client sees it, lists it
//     or counts it under sessions.maxPerClient) until taken.
//   - A create that finds the box's bounds full while the standby holds
//     room removes the standby first (displaceStandby), so a standby never
//     refuses a session the box would take without it.
//   - Its container's deadline label is its preparation plus twice
//     sessions.ttlSeconds: a session it becomes expires at its take plus
//     its TTL, which the sweep keeps within the label by replacing an
//     unused standby once sessions.ttlSeconds has passed. The reaper keeps
//     it (Listed) and removes it after a crash once the label passed; a
//     host stop removes it with the sessions (closeAll).
//   - It is handed out once, to one create, only while its supervisor's
//     stream is up; after a take (or a failure, then after standbyRetry)
//     the next one is prepared in the background.

// standbyOwner is a standby's owner until taken (no client uid is negative).
const standbyOwner = -1

// standbyRetry is how long a failed preparation waits before the next.
const standbyRetry = 30 * time.Second

// standbyPrepareTimeout bounds one preparation.
const standbyPrepareTimeout = 2 * time.Minute

// plainCreate reports whether p is the shape a standby was prepared in.
func (k *Kind) plainCreate(p apiwire.SessionCreate) bool {
	return p.Project == "" && !p.Network && len(p.Credentials) == 0 &&
		(p.MemoryMb == 0 || p.MemoryMb == k.cfg.Sessions.MemoryMB)
}

// deadline is the session's expiry (a taken standby's changes once).
func (s *Session) deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expires
}

// refill starts a standby's preparation when sessions.standby asks for one
// and none is ready or being prepared.
func (k *Kind) refill() {
	c := k.cfg.Sessions
	if c.Standby < 1 || !c.Enabled {
		return
	}
	sc, ok := k.life.Containers().(sandbox.SessionContainers)
	if !ok {
		return
	}
	k.mu.Lock()
	if k.stopped || k.standby != nil || k.refilling || k.now().Before(k.retryAt) {
		k.mu.Unlock()
		return
	}
	k.refilling = true
	k.standbyRun.Add(1)
	k.mu.Unlock()
	go func() {
		defer k.standbyRun.Done()
		s, err := k.prepareStandby(sc)
		k.mu.Lock()
		k.refilling = false
		if err != nil && !errors.Is(err, ErrBusy) {
			// No room (ErrBusy) is looked at again by the next sweep: a
			// reservation costs nothing. A failed start waits.
			k.retryAt = k.now().Add(standbyRetry)
		} else if err == nil && !k.stopped {
			k.standby = s
			s = nil
		}
		k.mu.Unlock()
		if err != nil && !errors.Is(err, sandbox.ErrShuttingDown) && !errors.Is(err, ErrBusy) {
			k.log.Warn("session standby not prepared; the next create takes the cold path", "err", err,
				"retry_in_s", int(standbyRetry.Seconds()))
		}
		if s != nil { // the kind stopped meanwhile
			s.close("host stopping")
		}
	}()
}

// prepareStandby makes one standby: admitted and reserved as a session,
// its container started with no project and no network.
func (k *Kind) prepareStandby(sc sandbox.SessionContainers) (*Session, error) {
	c := k.cfg.Sessions
	ttl := time.Duration(c.TTLSeconds) * time.Second
	id := k.newID()
	now := k.now()
	s := &Session{
		k: k, id: id, tag: ids.SessionName(id), owner: standbyOwner, memMB: c.MemoryMB, standby: true,
		created: now, expires: now.Add(ttl), label: now.Add(2 * ttl), state: apiwire.SessionStarting, lastUsed: now,
		pending: map[string]*pending{}, ended: make(chan struct{}), removed: make(chan struct{}), started: make(chan struct{}),
	}
	s.log = k.log.With("session", id)
	done, err := k.host.Admit(func() error { return k.reserve(s) })
	if err != nil {
		return nil, err
	}
	s.done = done
	ctx, cancel := context.WithTimeout(k.host.Stopped(), standbyPrepareTimeout)
	defer cancel()
	err = s.start(ctx, sc, "")
	close(s.started)
	if err != nil {
		s.close("start failed")
		return nil, err
	}
	s.log.Info("session standby ready", "took_ms", k.now().Sub(now).Milliseconds())
	return s, nil
}

// takeStandby hands the ready standby to owner when p is plain: nil, nil
// when there is none (or p is not plain); an error when owner is at
// sessions.maxPerClient.
func (k *Kind) takeStandby(p apiwire.SessionCreate, owner int, ttl time.Duration) (*Session, error) {
	if !k.plainCreate(p) {
		return nil, nil
	}
	c := k.cfg.Sessions
	k.mu.Lock()
	s := k.standby
	if s == nil {
		k.mu.Unlock()
		return nil, nil
	}
	select {
	case <-s.ended: // its supervisor is gone: the cold path, and it goes
		k.standby = nil
		k.mu.Unlock()
		go s.close("supervisor gone")
		return nil, nil
	default:
	}
	if k.perOwner[owner] >= c.MaxPerClient {
		k.mu.Unlock()
		return nil, busyf("this client has %d sessions, its bound (sessions.maxPerClient); close one first", c.MaxPerClient)
	}
	k.standby = nil
	s.standby = false
	if k.perOwner[standbyOwner]--; k.perOwner[standbyOwner] <= 0 {
		delete(k.perOwner, standbyOwner)
	}
	k.perOwner[owner]++
	now := k.now()
	s.mu.Lock()
	s.owner, s.created, s.lastUsed = owner, now, now
	s.expires = now.Add(ttl)
	if s.expires.After(s.label) { // cannot happen: the sweep replaces it first
		s.expires = s.label
	}
	s.mu.Unlock()
	k.mu.Unlock()
	k.m.created.Inc()
	s.log.Info("session admitted", "owner_uid", owner, "project", "", "memory_mb", s.memMB, "ttl_s", int(ttl.Seconds()),
		"network", false, "credentials", []string(nil), "standby", true)
	k.refill()
	return s, nil
}

// displaceStandby removes the ready standby so that a create the bounds
// refused can take its room; false when there was none.
func (k *Kind) displaceStandby(owner int) bool {
	k.mu.Lock()
	s := k.standby
	if k.perOwner[owner] >= k.cfg.Sessions.MaxPerClient {
		s = nil // the client's own bound: no room to make
	}
	if s != nil {
		k.standby = nil
	}
	k.mu.Unlock()
	if s == nil {
		return false
	}
	s.close("standby displaced")
	return true
}

// sweepStandby replaces a standby that could no longer serve a full
// sessions.ttlSeconds, or whose supervisor is gone, and starts a
// preparation when one is due.
func (k *Kind) sweepStandby(now time.Time) {
	ttl := time.Duration(k.cfg.Sessions.TTLSeconds) * time.Second
	k.mu.Lock()
	s := k.standby
	if s != nil {
		gone := false
		select {
		case <-s.ended:
			gone = true
		default:
		}
		if gone || !now.Before(s.label.Add(-ttl)) {
			k.standby = nil
		} else {
			s = nil
		}
	}
	k.mu.Unlock()
	if s != nil {
		s.close("standby expired")
	}
	k.refill()
}

// standbyReasons are the close reasons of a standby (metric labels).
var standbyReasons = []string{"standby displaced", "standby expired"}

func isStandbyReason(r string) bool { return slices.Contains(standbyReasons, r) }
