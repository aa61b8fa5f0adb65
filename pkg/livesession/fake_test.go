package livesession

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// fakeDocker is the kit's Docker with what sessions need: Attach runs a
// hand-written supervisor (fakeSup) on the container's stdin and stdout;
// Pause and Unpause are recorded, and a request that reaches a paused
// container is recorded as a violation.
type fakeDocker struct {
	*sandboxtest.Docker

	mu     sync.Mutex
	sups   map[string]*fakeSup // by container id
	calls  []string            // "pause <id>", "unpause <id>", "request <op>"
	paused map[string]bool
	bad    []string
	// attachEntered and attachRelease, when set, hold each Attach: it
	// sends on the first, then waits for the second to close.
	attachEntered chan struct{}
	attachRelease chan struct{}
}

func newFakeDocker(d *sandboxtest.Docker) *fakeDocker {
	f := &fakeDocker{Docker: d, sups: map[string]*fakeSup{}, paused: map[string]bool{}}
	d.RemoveHook = func(id string) {
		f.mu.Lock()
		s := f.sups[id]
		delete(f.sups, id)
		f.mu.Unlock()
		if s != nil {
			s.stop()
		}
	}
	return f
}

func (f *fakeDocker) record(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakeDocker) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeDocker) Pause(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "pause")
	f.paused[id] = true
	return nil
}

func (f *fakeDocker) Unpause(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "unpause")
	f.paused[id] = false
	return nil
}

func (f *fakeDocker) sup(id string) *fakeSup {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sups[id]
}

func (f *fakeDocker) Attach(_ context.Context, id string, stdout, stderr io.Writer) (sandbox.SessionStream, error) {
	if f.attachEntered != nil {
		f.attachEntered <- struct{}{}
		<-f.attachRelease
	}
	inR, inW := io.Pipe()
	s := &fakeSup{f: f, id: id, in: inR, inW: inW, enc: sessionwire.NewEventEncoder(stdout), out: stdout,
		running: map[string]chan string{}, files: map[string][]byte{}, modes: map[string]uint32{}, done: make(chan error, 1), stopped: make(chan struct{})}
	f.mu.Lock()
	f.sups[id] = s
	f.mu.Unlock()
	go s.serve()
	return s, nil
}

// fakeSup answers sessionwire requests as the supervisor would, by a
// small script language in an exec's command:
//
//	echo TEXT   stdout TEXT\n, exit 0
//	err TEXT    stderr TEXT\n, exit 0
//	exit N      exit N
//	flood N     N bytes of stdout cut at maxOutputBytes, as the supervisor cuts
//	block       runs until a KILL signal (a cancel), then "cancelled"
//	die         the supervisor exits (its stdout ends)
//	garbage     a frame of an unknown type (a protocol violation)
type fakeSup struct {
	f       *fakeDocker
	id      string
	in      *io.PipeReader
	inW     *io.PipeWriter
	enc     *sessionwire.EventEncoder
	out     io.Writer
	mu      sync.Mutex
	running map[string]chan string
	files   map[string][]byte
	modes   map[string]uint32 // a put's mode as sent (0: the supervisor's 0644)
	done    chan error
	once    sync.Once
	stopped chan struct{}
	execs   sync.WaitGroup
}

func (s *fakeSup) Write(p []byte) (int, error) { return s.inW.Write(p) }
func (s *fakeSup) Done() <-chan error          { return s.done }
func (s *fakeSup) Close()                      { s.inW.Close() }

func (s *fakeSup) stop() {
	s.once.Do(func() {
		close(s.stopped)
		s.inW.CloseWithError(errors.New("container removed"))
		s.done <- nil
		close(s.done)
	})
}

func (s *fakeSup) serve() {
	defer s.stop()
	d := sessionwire.NewRequestDecoder(s.in)
	for {
		r, err := d.Next()
		if err != nil {
			return
		}
		s.f.mu.Lock()
		if s.f.paused[s.id] {
			s.f.bad = append(s.f.bad, "request "+r.Op+" reached a paused container")
		}
		s.f.calls = append(s.f.calls, "request "+r.Op)
		s.f.mu.Unlock()
		switch r.Op {
		case sessionwire.OpExec:
			if s.exec(r.ID, *r.Exec) {
				return
			}
		case sessionwire.OpSignal:
			s.mu.Lock()
			ch := s.running[r.Signal.Target]
			delete(s.running, r.Signal.Target)
			s.mu.Unlock()
			if ch == nil {
				s.fail(r.ID, sessionwire.ErrNotFound)
				continue
			}
			ch <- r.Signal.Name
			s.enc.Event(sessionwire.Event{ID: r.ID, Kind: sessionwire.EventDone})
		case sessionwire.OpPut:
			data, _ := io.ReadAll(d.Data())
			s.mu.Lock()
			s.files[r.File.Path] = data
			s.modes[r.File.Path] = r.File.Mode
			s.mu.Unlock()
			s.enc.Event(sessionwire.Event{ID: r.ID, Kind: sessionwire.EventFile, File: &sessionwire.FileResult{Size: int64(len(data))}})
		case sessionwire.OpGet, sessionwire.OpGetDir:
			s.mu.Lock()
			data, ok := s.files[r.File.Path]
			mode := s.modes[r.File.Path]
			s.mu.Unlock()
			if !ok {
				s.fail(r.ID, sessionwire.ErrNotFound)
				continue
			}
			if mode == 0 {
				mode = 0o644
			}
			s.enc.Data(sessionwire.FrameFileData, r.ID, data)
			s.enc.Event(sessionwire.Event{ID: r.ID, Kind: sessionwire.EventFile, File: &sessionwire.FileResult{Size: int64(len(data)), Mode: mode}})
		case sessionwire.OpList:
			s.mu.Lock()
			var es []sessionwire.Entry
			for name, data := range s.files {
				es = append(es, sessionwire.Entry{Name: name, Type: sessionwire.EntryFile, Size: int64(len(data)), Mode: 0o644})
			}
			s.mu.Unlock()
			s.enc.Event(sessionwire.Event{ID: r.ID, Kind: sessionwire.EventList, List: &sessionwire.ListBatch{Entries: es, Done: true}})
		}
	}
}

func (s *fakeSup) fail(id, code string) {
	s.enc.Event(sessionwire.Event{ID: id, Kind: sessionwire.EventError, Error: &sessionwire.Error{Code: code, Message: "refused"}})
}

// exec runs one scripted command; true: the supervisor is gone.
func (s *fakeSup) exec(id string, x sessionwire.Exec) bool {
	verb, arg, _ := strings.Cut(x.Command, " ")
	result := func(r sessionwire.ExecResult) {
		s.enc.Event(sessionwire.Event{ID: id, Kind: sessionwire.EventResult, Result: &r})
	}
	switch verb {
	case "die":
		return true
	case "garbage":
		s.out.Write([]byte{99, 0, 0, 0, 1, 'x'})
		return false
	}
	s.enc.Event(sessionwire.Event{ID: id, Kind: sessionwire.EventStarted})
	switch verb {
	case "echo":
		s.enc.Data(sessionwire.FrameStdout, id, []byte(arg+"\n"))
		result(sessionwire.ExecResult{})
	case "placeholders": // what the exec's request carried
		var b strings.Builder
		for k, v := range x.Placeholders {
			fmt.Fprintf(&b, "%s=%s ", k, v)
		}
		if strings.Contains(x.RunCA, "BEGIN CERTIFICATE") {
			b.WriteString("ca")
		}
		fmt.Fprintf(&b, " proxy=%v", x.Proxy)
		s.enc.Data(sessionwire.FrameStdout, id, []byte(b.String()+"\n"))
		result(sessionwire.ExecResult{})
	case "err":
		s.enc.Data(sessionwire.FrameStderr, id, []byte(arg+"\n"))
		result(sessionwire.ExecResult{})
	case "exit":
		n, _ := strconv.Atoi(arg)
		result(sessionwire.ExecResult{ExitCode: n})
	case "flood":
		n, _ := strconv.Atoi(arg)
		keep := min(n, x.MaxOutputBytes)
		s.enc.Data(sessionwire.FrameStdout, id, bytes.Repeat([]byte("y"), keep))
		result(sessionwire.ExecResult{StdoutTruncated: n > keep, StdoutDropped: int64(n - keep)})
	case "spoof":
		// Frames for a request that does not exist, and for a fresh one
		// the host has not sent yet, then its own result.
		s.enc.Data(sessionwire.FrameStdout, "x999", []byte("not yours\n"))
		s.enc.Event(sessionwire.Event{ID: "x998", Kind: sessionwire.EventResult, Result: &sessionwire.ExecResult{ExitCode: 9}})
		s.enc.Data(sessionwire.FrameStdout, id, []byte("mine\n"))
		result(sessionwire.ExecResult{})
	case "silent":
		// Started, then nothing: a supervisor that never answers.
	case "block":
		ch := make(chan string, 1)
		s.mu.Lock()
		s.running[id] = ch
		s.mu.Unlock()
		s.execs.Add(1)
		go func() {
			defer s.execs.Done()
			select {
			case sig := <-ch:
				result(sessionwire.ExecResult{ExitCode: 137, Signal: sig, Cancelled: sig == sessionwire.SignalKill})
			case <-s.stopped:
			}
		}()
	default:
		result(sessionwire.ExecResult{ExitCode: 127})
	}
	return false
}

// syncBuffer is a log sink the host's goroutines write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
