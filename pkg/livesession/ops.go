package livesession

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// Exec runs x in session s, handing each event to emit as it comes: started,
// output chunks, then a result or an error. An emit error (the client
// went away) or ctx's end kills the exec's process group and returns.
func (k *Kind) Exec(ctx context.Context, s *Session, x apiwire.SessionExec, emit func(apiwire.SessionExecEvent) error) error {
	if x.Network || len(x.Credentials) > 0 {
		return k.networkExec(ctx, s, x, emit) // network.go
	}
	req := k.wireExec(x)
	if err := req.Validate(); err != nil {
		return invalidf("%s", genericInvalid(err))
	}
	return k.exec(ctx, s, x, req, "", emit)
}

// wireExec is x as the supervisor is asked to run it.
func (k *Kind) wireExec(x apiwire.SessionExec) sessionwire.Exec {
	return sessionwire.Exec{
		Command: x.Command, Executable: x.Executable, Args: x.Args, Cwd: x.Cwd, Env: x.Env, Stdin: x.Stdin,
		TimeoutSeconds: x.TimeoutSeconds, Root: x.Root, MaxOutputBytes: k.cfg.Sessions.MaxOutputBytes,
	}
}

// exec runs the validated req under id (s.nextID's; "": a fresh one).
func (k *Kind) exec(ctx context.Context, s *Session, x apiwire.SessionExec, req sessionwire.Exec, id string, emit func(apiwire.SessionExecEvent) error) error {
	if err := s.begin(); err != nil {
		return err
	}
	// The supervisor enforces the exec's timeout; the host does not rely
	// on it (a supervisor that never answers holds no request forever).
	ctx, cancel := context.WithTimeoutCause(ctx, time.Duration(req.Timeout())*time.Second+k.execGrace, errOverdue)
	defer cancel()
	began := time.Now()
	s.mu.Lock()
	if s.execs >= maxExecs {
		s.mu.Unlock()
		s.end()
		return &busy{msg: fmt.Sprintf("the session runs %d execs, its bound; wait for one to end", maxExecs), retry: time.Second}
	}
	s.execs++
	s.execsTotal++
	s.mu.Unlock()
	id, p, err := s.send(sessionwire.Request{ID: id, Op: sessionwire.OpExec, Exec: &req}, nil, "x")
	if err != nil {
		s.mu.Lock()
		s.execs--
		s.mu.Unlock()
		s.end()
		return err
	}
	// The exec is counted out before its last event goes to the client,
	// so the client's next request (a pause, say) never finds it in flight.
	finish := sync.OnceFunc(func() {
		s.mu.Lock()
		s.execs--
		s.mu.Unlock()
		s.end()
	})
	defer finish()
	kill := func() {
		p.leave()
		if _, sp, err := s.send(sessionwire.Request{Op: sessionwire.OpSignal, Signal: &sessionwire.Signal{Target: id, Name: sessionwire.SignalKill}}, nil, "k"); err == nil {
			sp.leave()
		}
	}
	for {
		f, err := s.recv(ctx, p)
		if err != nil {
			if !errors.Is(err, ErrEnded) {
				kill()
			}
			k.m.execs.WithLabelValues("error").Inc()
			if errors.Is(err, errOverdue) {
				s.log.Warn("session exec got no result from the supervisor in time; killed", "exec", id, "timeout_s", req.Timeout())
				finish()
				return emit(apiwire.SessionExecEvent{Type: apiwire.ExecError, ExecID: id, Error: "the session gave no result in time; the exec was killed"})
			}
			return err
		}
		var ev apiwire.SessionExecEvent
		switch f.Type {
		case sessionwire.FrameStdout:
			ev = apiwire.SessionExecEvent{Type: apiwire.ExecStdout, ExecID: id, Data: f.Data}
		case sessionwire.FrameStderr:
			ev = apiwire.SessionExecEvent{Type: apiwire.ExecStderr, ExecID: id, Data: f.Data}
		case sessionwire.FrameEvent:
			switch f.Event.Kind {
			case sessionwire.EventStarted:
				ev = apiwire.SessionExecEvent{Type: apiwire.ExecStarted, ExecID: id}
			case sessionwire.EventResult:
				r := f.Event.Result
				res := &apiwire.SessionExecResult{
					ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, Cancelled: r.Cancelled,
					StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
					StdoutDropped: r.StdoutDropped, StderrDropped: r.StderrDropped, StartMs: r.StartMs, RunMs: r.RunMs,
				}
				took := time.Since(began)
				k.m.latency.Observe(took.Seconds())
				k.m.execs.WithLabelValues(execResult(res)).Inc()
				s.log.Debug("session exec done", "exec", id, "exit_code", r.ExitCode, "took_us", took.Microseconds())
				finish()
				return emit(apiwire.SessionExecEvent{Type: apiwire.ExecResult, ExecID: id, Result: res})
			case sessionwire.EventError:
				k.m.execs.WithLabelValues("error").Inc()
				finish()
				return emit(apiwire.SessionExecEvent{Type: apiwire.ExecError, ExecID: id, Error: execErrorText(f.Event.Error.Code)})
			default:
				continue // no other event is an exec's; the decoder checked the shapes
			}
		default:
			continue
		}
		if err := emit(ev); err != nil {
			kill()
			k.m.execs.WithLabelValues("error").Inc()
			return err
		}
	}
}

// maxExecs is the supervisor's bound of execs running at once in one
// session (sessionsup.DefaultMaxExecs): the host refuses past it at once
// (429) rather than send what the supervisor would refuse.
const maxExecs = 16

// errOverdue: an exec's result did not come within its timeout and
// execGrace.
var errOverdue = errors.New("exec overdue")

// DefaultExecGrace is how long past an exec's timeout the host waits for
// the supervisor's result.
const DefaultExecGrace = 30 * time.Second

func execResult(r *apiwire.SessionExecResult) string {
	switch {
	case r.TimedOut:
		return "timeout"
	case r.Cancelled:
		return "cancelled"
	case r.ExitCode == 0:
		return "ok"
	}
	return "failed"
}

// execErrorText is the fixed text of an exec's error code (the
// supervisor's own message never reaches a client).
func execErrorText(code string) string {
	switch code {
	case sessionwire.ErrBusy:
		return fmt.Sprintf("the session runs %d execs, its bound; wait for one to end", maxExecs)
	case sessionwire.ErrStart:
		return "the command could not be started (not found, not executable, or a bad cwd)"
	case sessionwire.ErrBadRequest:
		return "the exec was refused"
	case sessionwire.ErrDenied:
		return "the exec was denied"
	}
	return "the session could not run the command"
}

// Cancel kills the running exec execID of s (its process group).
func (k *Kind) Cancel(ctx context.Context, s *Session, execID string) error {
	if !sessionwire.ValidID(execID) {
		return invalidf("execId is not an exec id")
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	_, p, err := s.send(sessionwire.Request{Op: sessionwire.OpSignal, Signal: &sessionwire.Signal{Target: execID, Name: sessionwire.SignalKill}}, nil, "k")
	if err != nil {
		return err
	}
	defer p.leave()
	f, err := s.recv(ctx, p)
	if err != nil {
		return err
	}
	if f.Type == sessionwire.FrameEvent && f.Event.Kind == sessionwire.EventError {
		if f.Event.Error.Code == sessionwire.ErrNotFound || f.Event.Error.Code == sessionwire.ErrBadRequest {
			return refused(ErrState, "no such running exec in the session")
		}
		return fileError(s, f.Event.Error.Code)
	}
	return nil
}

// fileError maps a supervisor's error code to the host's.
func fileError(s *Session, code string) error {
	switch code {
	case sessionwire.ErrNotFound:
		return ErrFileNotFound
	case sessionwire.ErrDenied:
		return refused(ErrInvalid, "a symlink on the path, a path out of its root, or no permission")
	case sessionwire.ErrNotRegular:
		return refused(ErrInvalid, "not a regular file (get), or not a directory (list, tar)")
	case sessionwire.ErrTooLarge:
		return refused(ErrTooLarge, "the file is over the session's bound, or the session is out of space")
	case sessionwire.ErrBadRequest:
		return refused(ErrInvalid, "the request was refused (an invalid path)")
	}
	s.log.Warn("session file operation failed in the supervisor", "code", code)
	return ErrSupervisor
}

// filePath checks a session path.
func filePath(p string) error {
	if err := sessionwire.ValidPath(p); err != nil {
		return invalidf("path: %s (relative to /work, or under /output or /tmp)", err)
	}
	return nil
}

// Put writes data at path in s, atomically.
func (k *Kind) Put(ctx context.Context, s *Session, path string, mode uint32, data []byte) (apiwire.SessionFile, error) {
	s.files.Lock() // one transfer's bytes in the host at a time
	defer s.files.Unlock()
	return k.putLocked(ctx, s, path, mode, data)
}

// putLocked is Put under s.files.
func (k *Kind) putLocked(ctx context.Context, s *Session, path string, mode uint32, data []byte) (apiwire.SessionFile, error) {
	if err := filePath(path); err != nil {
		return apiwire.SessionFile{}, err
	}
	if mode > 0o777 {
		return apiwire.SessionFile{}, invalidf("mode has bits beyond 0777")
	}
	if len(data) > k.cfg.Sessions.MaxFileBytes {
		return apiwire.SessionFile{}, tooLarge(int64(k.cfg.Sessions.MaxFileBytes))
	}
	if err := s.begin(); err != nil {
		return apiwire.SessionFile{}, err
	}
	defer s.end()
	_, p, err := s.send(sessionwire.Request{Op: sessionwire.OpPut, File: &sessionwire.File{Path: path, Size: int64(len(data)), Mode: mode}}, data, "p")
	if err != nil {
		return apiwire.SessionFile{}, err
	}
	defer p.leave()
	for {
		f, err := s.recv(ctx, p)
		if err != nil {
			return apiwire.SessionFile{}, err
		}
		if f.Type != sessionwire.FrameEvent {
			continue
		}
		switch f.Event.Kind {
		case sessionwire.EventFile:
			k.m.files.WithLabelValues("put").Inc()
			return apiwire.SessionFile{Path: path, Size: f.Event.File.Size}, nil
		case sessionwire.EventError:
			return apiwire.SessionFile{}, fileError(s, f.Event.Error.Code)
		}
	}
}

// Get reads the file at path in s (tar: the directory at path as a tar
// stream), at most sessions.maxFileBytes.
func (k *Kind) Get(ctx context.Context, s *Session, path string, tar bool) (apiwire.SessionFile, error) {
	if err := filePath(path); err != nil {
		return apiwire.SessionFile{}, err
	}
	s.files.Lock() // one transfer's bytes in the host at a time
	defer s.files.Unlock()
	if err := s.begin(); err != nil {
		return apiwire.SessionFile{}, err
	}
	defer s.end()
	op := sessionwire.OpGet
	if tar {
		op = sessionwire.OpGetDir
	}
	_, p, err := s.send(sessionwire.Request{Op: op, File: &sessionwire.File{Path: path}}, nil, "g")
	if err != nil {
		return apiwire.SessionFile{}, err
	}
	defer p.leave()
	max := k.cfg.Sessions.MaxFileBytes
	var data []byte
	for {
		f, err := s.recv(ctx, p)
		if err != nil {
			return apiwire.SessionFile{}, err
		}
		if f.Type == sessionwire.FrameFileData {
			if len(data)+len(f.Data) > max {
				// The rest is dropped by the multiplexer (p.leave).
				return apiwire.SessionFile{}, refused(ErrTooLarge, fmt.Sprintf("over %d bytes (sessions.maxFileBytes)", max))
			}
			data = append(data, f.Data...)
			continue
		}
		if f.Type != sessionwire.FrameEvent {
			continue
		}
		switch f.Event.Kind {
		case sessionwire.EventFile:
			r := f.Event.File
			if r.Size != int64(len(data)) {
				s.log.Warn("session get: the supervisor's size is not what it sent", "said", r.Size, "sent", len(data))
				return apiwire.SessionFile{}, ErrSupervisor
			}
			k.m.files.WithLabelValues(op).Inc()
			return apiwire.SessionFile{Path: path, Size: r.Size, Mode: r.Mode, Changed: r.Changed, Skipped: r.Skipped, Data: data}, nil
		case sessionwire.EventError:
			return apiwire.SessionFile{}, fileError(s, f.Event.Error.Code)
		}
	}
}

// ListDir lists the directory at path in s.
func (k *Kind) ListDir(ctx context.Context, s *Session, path string) (apiwire.SessionListing, error) {
	if err := filePath(path); err != nil {
		return apiwire.SessionListing{}, err
	}
	if err := s.begin(); err != nil {
		return apiwire.SessionListing{}, err
	}
	defer s.end()
	_, p, err := s.send(sessionwire.Request{Op: sessionwire.OpList, File: &sessionwire.File{Path: path}}, nil, "l")
	if err != nil {
		return apiwire.SessionListing{}, err
	}
	defer p.leave()
	out := apiwire.SessionListing{Path: path, Entries: []apiwire.SessionEntry{}}
	for {
		f, err := s.recv(ctx, p)
		if err != nil {
			return apiwire.SessionListing{}, err
		}
		if f.Type != sessionwire.FrameEvent {
			continue
		}
		switch f.Event.Kind {
		case sessionwire.EventList:
			for _, e := range f.Event.List.Entries {
				if len(out.Entries) >= sessionwire.MaxListEntries {
					out.Truncated = true // a supervisor sending more than it may
					break
				}
				out.Entries = append(out.Entries, apiwire.SessionEntry{Name: e.Name, Type: e.Type, Size: e.Size, Mode: e.Mode})
			}
			if f.Event.List.Done {
				out.Truncated = out.Truncated || f.Event.List.Truncated
				return out, nil
			}
		case sessionwire.EventError:
			return apiwire.SessionListing{}, fileError(s, f.Event.Error.Code)
		}
	}
}

// Pause freezes s at a client's request.
func (k *Kind) Pause(s *Session) error {
	err := s.pause("request")
	if err != nil && !errors.Is(err, ErrState) {
		s.log.Error("session pause failed", "err", err)
		return refused(ErrSupervisor, "the session could not be paused; the host log has details")
	}
	return err
}

// Resume thaws s at a client's request (a running session is left as is).
func (k *Kind) Resume(s *Session) error {
	if err := s.resume("explicit"); err != nil && !errors.Is(err, errNotPaused) {
		return err
	}
	return nil
}

// Close removes s at a client's request.
func (k *Kind) Close(s *Session) { s.close("request") }
