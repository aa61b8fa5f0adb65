package livesession

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// Session is one live session.
type Session struct {
	k                *Kind
	id, tag, project string
	owner, slot      int
	guest            int
	memMB            int
	created, expires time.Time
	log              *slog.Logger
	h                *sandbox.Handle
	sc               sandbox.SessionContainers
	sink             *workerlog.Sink
	done             func() // the host's Admit
	// standby: prepared for nobody yet (standby.go); under the kind's mu.
	// A taken standby's owner and expires change under the kind's mu and
	// s.mu before anyone but the kind sees it.
	standby bool
	// label is the container's deadline label (the reaper's), fixed at
	// construction: expires, or for a standby past any expires it takes.
	label time.Time
	net   *netState // nil: no network (network.go)

	// trans serialises the state's transitions (pause, resume, close)
	// and the Docker calls they make.
	trans sync.Mutex
	// files lets one file transfer hold its bytes in the host at a time.
	files sync.Mutex

	mu         sync.Mutex
	state      string
	lastUsed   time.Time
	inflight   int
	execs      int
	execsTotal int
	resumes    int
	stream     sandbox.SessionStream
	enc        *sessionwire.RequestEncoder
	pending    map[string]*pending
	next       uint64
	ended      chan struct{} // closed once the stream is gone
	endOnce    sync.Once
	closing    bool
	removed    chan struct{}
	// started is closed once start returned: a close (the host stopping)
	// waits for it, so it never races the start for the handle.
	started chan struct{}
}

// pending is one request's frames, handed over by the multiplexer.
type pending struct {
	ch       chan sessionwire.EventFrame
	gone     chan struct{}
	goneOnce sync.Once
}

// leave: nobody reads p any more; the multiplexer drops its frames.
func (p *pending) leave() { p.goneOnce.Do(func() { close(p.gone) }) }

// Status is the session as the API shows it.
func (s *Session) Status() apiwire.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	if s.closing {
		st = apiwire.SessionClosing
	}
	out := apiwire.Session{
		ID: s.id, State: st, OwnerUID: s.owner, Project: s.project, MemoryMb: s.memMB,
		CreatedAt: s.created, ExpiresAt: s.expires, LastUsed: s.lastUsed,
		Execs: s.execs, ExecsTotal: s.execsTotal, Resumes: s.resumes,
	}
	s.networkStatus(&out)
	return out
}

// start creates, starts and attaches the session's container.
func (s *Session) start(ctx context.Context, sc sandbox.SessionContainers, workspace string) error {
	k, c := s.k, s.k.cfg.Sessions
	var err error
	if s.guest, err = k.host.GuestUID(ids.SessionSlot(s.slot)); err != nil {
		return fmt.Errorf("guest uid: %w", err)
	}
	if workspace == "" {
		if workspace, err = sandbox.EmptyWorkspace(k.cfg.WorkspaceRoot); err != nil {
			return fmt.Errorf("empty workspace: %w", err)
		}
	}
	s.h = &sandbox.Handle{ID: s.id, Channel: s.tag, Tag: s.tag, Deadline: s.label, Quiet: true, Guest: s.guest}
	if s.h.Container, err = ids.ContainerName(s.tag, s.id); err != nil {
		return err
	}
	s.sc = sc
	if err := s.prepareNetwork(ctx); err != nil {
		return fmt.Errorf("session broker: %w", err)
	}
	spec := sandbox.ContainerSpec{
		Name: s.h.Container, Image: k.cfg.Runs.Image, UID: s.guest, GID: s.guest,
		WorkspaceDir: workspace, TurnDir: s.h.Dir, MemoryMB: s.memMB, CPUs: c.CPUs, Pids: c.Pids, TmpfsMB: c.TmpfsMB,
		Runtime: k.cfg.Runtime, LogTag: "sandbox/" + s.tag,
		Labels: sandbox.Labels(k.cfg.Installation, s.id, s.tag, s.label),
		Session: &sandbox.SessionContainer{WorkMB: c.WorkMB, OutputMB: c.OutputMB, Command: []string{
			toolboxWorker, "session", strconv.Itoa(s.guest), strconv.Itoa(s.guest), container.WorkPath}},
	}
	s.h.CreateTried = true
	if s.h.ContainerID, err = k.life.Containers().Create(ctx, spec); err != nil {
		return fmt.Errorf("container create: %w", err)
	}
	// The supervisor's own log lines and every exec's output go to the
	// journal as sandbox/session-<id> (bounded, pkg/workerlog).
	s.sink = k.life.WorkerLogs().Turn(s.tag, s.id, s.h.Container)
	pr, pw := io.Pipe()
	stream, err := sc.Attach(ctx, s.h.ContainerID, pw, s.sink)
	if err != nil {
		pw.Close()
		return fmt.Errorf("container attach: %w", err)
	}
	s.mu.Lock()
	s.stream, s.enc = stream, sessionwire.NewRequestEncoder(stream)
	s.state = apiwire.SessionRunning
	s.mu.Unlock()
	go func() {
		err := <-stream.Done()
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	go s.mux(sessionwire.NewEventDecoder(pr))
	s.log.Info("session started", "container", s.h.Container, "guest_uid", s.guest, "expires", s.label.UTC().Format(time.RFC3339),
		"standby", s.standby)
	return nil
}

// mux hands each frame of the supervisor's stream to its request until the
// stream ends or breaks the protocol; either ends the session.
func (s *Session) mux(dec *sessionwire.EventDecoder) {
	for {
		f, err := dec.Next()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if !closing {
				if errors.Is(err, sessionwire.ErrProtocol) {
					s.log.Warn("session stream refused; ending the session", "err", err)
				} else {
					s.log.Warn("session supervisor went away; ending the session", "err", err)
				}
				s.endStream()
				go s.close("supervisor gone")
				return
			}
			s.endStream()
			return
		}
		if f.Type == sessionwire.FrameStdout || f.Type == sessionwire.FrameStderr {
			s.sink.Write(f.Data)
		}
		s.mu.Lock()
		p := s.pending[f.ID]
		final := f.Type == sessionwire.FrameEvent && final(f.Event)
		if final {
			delete(s.pending, f.ID)
		}
		s.mu.Unlock()
		if p == nil {
			continue // a request the host no longer waits for
		}
		select {
		case p.ch <- f:
		case <-p.gone:
		}
	}
}

// final: the request's last event.
func final(ev sessionwire.Event) bool {
	return ev.Kind != sessionwire.EventStarted && (ev.Kind != sessionwire.EventList || ev.List.Done)
}

func (s *Session) endStream() { s.endOnce.Do(func() { close(s.ended) }) }

// begin marks a request in flight, resuming a paused session first.
func (s *Session) begin() error {
	if err := s.resume("request"); err != nil && !errors.Is(err, errNotPaused) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.state != apiwire.SessionRunning {
		return ErrState
	}
	s.inflight++
	s.lastUsed = s.k.now()
	return nil
}

// end marks a request done.
func (s *Session) end() {
	s.mu.Lock()
	s.inflight--
	s.lastUsed = s.k.now()
	s.mu.Unlock()
}

// idleSince is how long the running session has had nothing in flight (0
// when something is, or when it is not running).
func (s *Session) idleSince(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.state != apiwire.SessionRunning || s.inflight > 0 {
		return 0
	}
	return now.Sub(s.lastUsed)
}

// send writes a request (a put with its data) under a fresh id and returns
// what the multiplexer will hand over for it.
func (s *Session) send(r sessionwire.Request, data []byte, prefix string) (string, *pending, error) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return "", nil, ErrState
	}
	id := r.ID // a network exec's, from nextID
	if id == "" {
		s.next++
		id = prefix + strconv.FormatUint(s.next, 10)
	}
	p := &pending{ch: make(chan sessionwire.EventFrame, 64), gone: make(chan struct{})}
	s.pending[id] = p
	enc := s.enc
	s.mu.Unlock()
	r.ID = id
	var err error
	if r.Op == sessionwire.OpPut {
		err = enc.Put(r, data)
	} else {
		err = enc.Request(r)
	}
	if err != nil {
		s.forget(id, p)
		if errors.Is(err, sessionwire.ErrInvalidRequest) {
			return "", nil, invalidf("%s", genericInvalid(err))
		}
		return "", nil, fmt.Errorf("%w: %w", ErrEnded, err)
	}
	return id, p, nil
}

// nextID is a fresh request id, for a request whose id is known before
// it is sent (a network exec's approval names it).
func (s *Session) nextID(prefix string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return "", ErrState
	}
	s.next++
	return prefix + strconv.FormatUint(s.next, 10), nil
}

func (s *Session) forget(id string, p *pending) {
	p.leave()
	s.mu.Lock()
	if s.pending[id] == p {
		delete(s.pending, id)
	}
	s.mu.Unlock()
}

// genericInvalid is a refused request's reason: sessionwire's messages
// name fields, never values.
func genericInvalid(err error) string {
	m := err.Error()
	if len(m) > 200 {
		m = m[:200]
	}
	return m
}

// recv is p's next frame; ErrEnded once the session's stream is gone.
func (s *Session) recv(ctx context.Context, p *pending) (sessionwire.EventFrame, error) {
	select {
	case f := <-p.ch:
		return f, nil
	default:
	}
	select {
	case f := <-p.ch:
		return f, nil
	case <-s.ended:
		select {
		case f := <-p.ch:
			return f, nil
		default:
		}
		return sessionwire.EventFrame{}, ErrEnded
	case <-ctx.Done():
		return sessionwire.EventFrame{}, context.Cause(ctx)
	}
}

var errNotPaused = errors.New("not paused")

// pause freezes the session (reason: "idle" or "request").
func (s *Session) pause(reason string) error {
	s.trans.Lock()
	defer s.trans.Unlock()
	s.mu.Lock()
	if s.closing || s.state != apiwire.SessionRunning {
		s.mu.Unlock()
		return ErrState
	}
	if s.inflight > 0 {
		// A frozen exec would pass its timeout on the host's clock
		// while its supervisor, frozen too, cannot end it.
		s.mu.Unlock()
		return refused(ErrState, "the session has an exec or a file transfer in flight; pause it once they ended")
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.k.life.RemoveTimeout())
	defer cancel()
	if err := s.sc.Pause(ctx, s.h.ContainerID); err != nil {
		return fmt.Errorf("docker pause: %w", err)
	}
	s.mu.Lock()
	s.state = apiwire.SessionPaused
	s.mu.Unlock()
	s.log.Info("session paused", "reason", reason)
	return nil
}

// resume thaws a paused session (errNotPaused when it is not).
func (s *Session) resume(reason string) error {
	s.trans.Lock()
	defer s.trans.Unlock()
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrState
	}
	if s.state != apiwire.SessionPaused {
		s.mu.Unlock()
		return errNotPaused
	}
	s.mu.Unlock()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.k.life.RemoveTimeout())
	defer cancel()
	if err := s.sc.Unpause(ctx, s.h.ContainerID); err != nil {
		s.log.Error("session resume failed", "err", err)
		return refused(ErrSupervisor, "the session could not be resumed; the host log has details")
	}
	s.mu.Lock()
	s.state = apiwire.SessionRunning
	s.resumes++
	s.lastUsed = s.k.now()
	s.mu.Unlock()
	s.k.m.resumes.WithLabelValues(reason).Inc()
	s.log.Info("session resumed", "reason", reason, "took_ms", time.Since(began).Milliseconds())
	return nil
}

// close removes the session once (later calls wait for the first's end).
func (s *Session) close(reason string) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.removed
		return
	}
	s.closing = true
	s.mu.Unlock()
	defer s.k.wg.Done() // reserve's Add
	<-s.started
	s.trans.Lock()
	defer s.trans.Unlock()
	s.mu.Lock()
	stream, paused := s.stream, s.state == apiwire.SessionPaused
	s.mu.Unlock()
	// Stdin's end tells the supervisor to end its execs; the kill and
	// removal follow at once (nothing of a session is kept).
	if stream != nil {
		stream.Close()
	}
	if paused {
		// A frozen container is thawed so the kill reaches it at once.
		ctx, cancel := context.WithTimeout(context.Background(), s.k.life.RemoveTimeout())
		if err := s.sc.Unpause(ctx, s.h.ContainerID); err != nil {
			s.log.Debug("unpause before removal", "err", err)
		}
		cancel()
	}
	var cleanupErr error
	if s.h != nil {
		cleanupErr = s.k.life.Cleanup(s.h, s.log)
	}
	s.endStream()
	if s.sink != nil {
		s.k.life.CloseSink(s.h, s.sink)
	}
	s.k.release(s)
	s.k.m.closed.WithLabelValues(metricReason(reason)).Inc()
	st := s.Status()
	attrs := []any{"reason", reason, "execs", st.ExecsTotal, "resumes", st.Resumes, "lived_ms", s.k.now().Sub(s.created).Milliseconds()}
	if cleanupErr != nil {
		attrs = append(attrs, "cleanup_err", cleanupErr)
	}
	s.log.Info("session closed", attrs...)
	if s.done != nil {
		s.done()
	}
	close(s.removed)
}

func metricReason(reason string) string {
	if isStandbyReason(reason) {
		return "standby"
	}
	switch reason {
	case "request", "ttl", "host stopping", "supervisor gone", "start failed":
		return reason
	}
	return "other"
}
