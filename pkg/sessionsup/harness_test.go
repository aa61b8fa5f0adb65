package sessionsup

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// The tests run the supervisor in this process, as a subreaper (orphans
// come back to it) with the one reaper of the process. As root the guest
// is guestUID:guestGID and the uid switching is the real one; otherwise
// the guest is this user and root-only tests are skipped.
const guestUID, guestGID = 4242, 4242

var testReaper *supervisor.Reaper

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == supervisor.KillArg {
		syscall.Exit(supervisor.KillMain(os.Args[2]))
	}
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	testReaper = supervisor.NewReaper()
	code := m.Run()
	testReaper.Close()
	os.Exit(code)
}

func isRoot() bool { return os.Geteuid() == 0 }

func needRoot(t testing.TB) {
	t.Helper()
	if !isRoot() {
		t.Skip("needs root: switches to the guest uid (run the tests as root to cover it)")
	}
}

// fixture is a running session over in-memory pipes.
type fixture struct {
	t                 testing.TB
	s                 *Server
	enc               *sessionwire.RequestEncoder
	in                *io.PipeWriter
	work, output, tmp string
	uid, gid          int
	serveErr          chan error
	mu                sync.Mutex
	cond              *sync.Cond
	frames            map[string][]sessionwire.EventFrame
	final             map[string]bool
	decodeErr         error
}

func newFixture(t testing.TB, edit func(*Options)) *fixture {
	t.Helper()
	base, err := os.MkdirTemp("", "sessionsup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, work: filepath.Join(base, "work"), output: filepath.Join(base, "output"), tmp: filepath.Join(base, "tmp"),
		uid: os.Geteuid(), gid: os.Getegid(), frames: map[string][]sessionwire.EventFrame{}, final: map[string]bool{}}
	f.cond = sync.NewCond(&f.mu)
	if isRoot() {
		f.uid, f.gid = guestUID, guestGID
	}
	for _, d := range []string{f.work, f.output, f.tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, f.uid, f.gid); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{UID: f.uid, GID: f.gid, WorkDir: f.work, OutputDir: f.output, TmpDir: f.tmp,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if edit != nil {
		edit(&o)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s, err := New(o, outW, io.Discard, testReaper)
	if err != nil {
		t.Fatal(err)
	}
	f.s, f.in, f.enc = s, inW, sessionwire.NewRequestEncoder(inW)
	f.serveErr = make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		err := s.Serve(ctx, inR)
		inR.CloseWithError(errors.New("served"))
		f.serveErr <- err
	}()
	decoded := make(chan struct{})
	go func() {
		defer close(decoded)
		d := sessionwire.NewEventDecoder(outR)
		for {
			fr, err := d.Next()
			f.mu.Lock()
			if err != nil {
				f.decodeErr = err
				f.cond.Broadcast()
				f.mu.Unlock()
				return
			}
			f.frames[fr.ID] = append(f.frames[fr.ID], fr)
			if fr.Type == sessionwire.FrameEvent {
				switch fr.Event.Kind {
				case sessionwire.EventStarted:
				case sessionwire.EventList:
					f.final[fr.ID] = fr.Event.List.Done
				default:
					f.final[fr.ID] = true
				}
			}
			f.cond.Broadcast()
			f.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		s.Close()
		outW.Close()
		<-decoded
	})
	return f
}

// wait returns request id's frames once its final event came.
func (f *fixture) wait(id string) []sessionwire.EventFrame {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for !f.final[id] {
		if f.decodeErr != nil {
			f.t.Fatalf("event stream ended before %s's final event: %v", id, f.decodeErr)
		}
		f.cond.Wait()
	}
	return f.frames[id]
}

// waitStarted waits for exec id's started event (or its final one).
func (f *fixture) waitStarted(id string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		for _, fr := range f.frames[id] {
			if fr.Type == sessionwire.FrameEvent && fr.Event.Kind == sessionwire.EventStarted {
				return
			}
		}
		if f.final[id] {
			f.t.Fatalf("%s ended without starting: %+v", id, f.frames[id])
		}
		if f.decodeErr != nil {
			f.t.Fatalf("event stream ended: %v", f.decodeErr)
		}
		f.cond.Wait()
	}
}

func (f *fixture) send(r sessionwire.Request) {
	f.t.Helper()
	if err := f.enc.Request(r); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) put(id, p string, data []byte, mode uint32) []sessionwire.EventFrame {
	f.t.Helper()
	if err := f.enc.Put(sessionwire.Request{ID: id, Op: sessionwire.OpPut, File: &sessionwire.File{Path: p, Size: int64(len(data)), Mode: mode}}, data); err != nil {
		f.t.Fatal(err)
	}
	return f.wait(id)
}

func (f *fixture) file(op, id, p string) []sessionwire.EventFrame {
	f.t.Helper()
	f.send(sessionwire.Request{ID: id, Op: op, File: &sessionwire.File{Path: p}})
	return f.wait(id)
}

// execResult is what an exec sent.
type execResult struct {
	stdout, stderr string
	res            *sessionwire.ExecResult
	err            *sessionwire.Error
}

func collect(frames []sessionwire.EventFrame) execResult {
	var r execResult
	for _, fr := range frames {
		switch fr.Type {
		case sessionwire.FrameStdout:
			r.stdout += string(fr.Data)
		case sessionwire.FrameStderr:
			r.stderr += string(fr.Data)
		case sessionwire.FrameEvent:
			if fr.Event.Result != nil {
				r.res = fr.Event.Result
			}
			if fr.Event.Error != nil {
				r.err = fr.Event.Error
			}
		}
	}
	return r
}

func (f *fixture) exec(id string, x sessionwire.Exec) execResult {
	f.t.Helper()
	f.startExec(id, x)
	return collect(f.wait(id))
}

func (f *fixture) startExec(id string, x sessionwire.Exec) {
	f.t.Helper()
	if x.MaxOutputBytes == 0 {
		x.MaxOutputBytes = 1 << 20
	}
	f.send(sessionwire.Request{ID: id, Op: sessionwire.OpExec, Exec: &x})
}

// fileData is a get's bytes and its final event.
func fileData(frames []sessionwire.EventFrame) ([]byte, sessionwire.Event) {
	var b []byte
	var last sessionwire.Event
	for _, fr := range frames {
		if fr.Type == sessionwire.FrameFileData {
			b = append(b, fr.Data...)
		} else {
			last = fr.Event
		}
	}
	return b, last
}

// rawRequest frames r without validating it.
func rawRequest(t testing.TB, r sessionwire.Request) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return wire.AppendFrame(nil, wire.FrameType(sessionwire.FrameRequest), b)
}
