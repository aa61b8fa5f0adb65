package sessionsup

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

func TestExec(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		name           string
		x              sessionwire.Exec
		stdout, stderr string
		code           int
	}{
		{"shell", sessionwire.Exec{Command: "echo out; echo err >&2; exit 3"}, "out\n", "err\n", 3},
		{"argv", sessionwire.Exec{Executable: "printf", Args: []string{"%s-%s", "a b", "c"}}, "a b-c", "", 0},
		{"stdin", sessionwire.Exec{Executable: "cat", Stdin: []byte("in\x00put")}, "in\x00put", "", 0},
		{"env", sessionwire.Exec{Command: `printf %s "$FOO"`, Env: map[string]string{"FOO": "bar baz"}}, "bar baz", "", 0},
		{"home is the work dir", sessionwire.Exec{Command: `printf %s "$HOME"`}, f.work, "", 0},
		{"cwd default", sessionwire.Exec{Command: "pwd"}, f.work + "\n", "", 0},
		{"cwd tmp", sessionwire.Exec{Command: "pwd", Cwd: "/tmp"}, f.tmp + "\n", "", 0},
		{"uid", sessionwire.Exec{Command: "id -u; id -g"}, fmt.Sprintf("%d\n%d\n", f.uid, f.gid), "", 0},
		{"not found", sessionwire.Exec{Executable: "no-such-command-x"}, "", "session: no-such-command-x: not found in PATH\n", 127},
		{"signalled", sessionwire.Exec{Command: "kill -TERM $$"}, "", "", 128 + 15},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.exec(fmt.Sprintf("e%d", i), tt.x)
			if r.res == nil {
				t.Fatalf("no result: %+v", r.err)
			}
			if r.stdout != tt.stdout || r.stderr != tt.stderr || r.res.ExitCode != tt.code {
				t.Fatalf("got stdout %q stderr %q code %d; want %q %q %d", r.stdout, r.stderr, r.res.ExitCode, tt.stdout, tt.stderr, tt.code)
			}
		})
	}
}

func TestExecSignalledResultNamesTheSignal(t *testing.T) {
	f := newFixture(t, nil)
	r := f.exec("e", sessionwire.Exec{Command: "kill -TERM $$"})
	if r.res == nil || r.res.Signal != "TERM" || r.res.Cancelled || r.res.TimedOut {
		t.Fatalf("result %+v, want signal TERM, not cancelled or timed out", r.res)
	}
}

// TestExecEnvRefused: a variable outside the client's names is refused
// with a bad_request error, and the session goes on.
func TestExecEnvRefused(t *testing.T) {
	f := newFixture(t, nil)
	for i, name := range []string{"PATH", "LD_PRELOAD", "HOME", "https_proxy", "BASH_ENV"} {
		// The encoder validates too: write the frame as a careless host would.
		x := sessionwire.Exec{Command: "true", Env: map[string]string{name: "x"}, MaxOutputBytes: 10}
		raw := rawRequest(t, sessionwire.Request{ID: fmt.Sprintf("r%d", i), Op: sessionwire.OpExec, Exec: &x})
		if _, err := f.in.Write(raw); err != nil {
			t.Fatal(err)
		}
		r := collect(f.wait(fmt.Sprintf("r%d", i)))
		if r.err == nil || r.err.Code != sessionwire.ErrBadRequest || r.res != nil {
			t.Fatalf("%s: got %+v %+v, want a bad_request error", name, r.err, r.res)
		}
	}
	if r := f.exec("after", sessionwire.Exec{Command: "echo ok"}); r.stdout != "ok\n" {
		t.Fatalf("the session did not go on: %+v", r)
	}
}

// TestExecConcurrencyBound: past MaxExecs an exec is refused at once with
// busy; KILL cancels the running ones.
func TestExecConcurrencyBound(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.MaxExecs = 2 })
	f.startExec("a", sessionwire.Exec{Command: "sleep 1000"})
	f.startExec("b", sessionwire.Exec{Executable: "sleep", Args: []string{"1000"}})
	f.waitStarted("a")
	f.waitStarted("b")
	r := f.exec("c", sessionwire.Exec{Command: "true"})
	if r.err == nil || r.err.Code != sessionwire.ErrBusy {
		t.Fatalf("third exec: %+v %+v, want busy", r.err, r.res)
	}
	for _, id := range []string{"a", "b"} {
		f.send(sessionwire.Request{ID: "k" + id, Op: sessionwire.OpSignal, Signal: &sessionwire.Signal{Target: id, Name: sessionwire.SignalKill}})
		if ev := f.wait("k" + id); ev[len(ev)-1].Event.Kind != sessionwire.EventDone {
			t.Fatalf("signal %s: %+v", id, ev)
		}
		r := collect(f.wait(id))
		if r.res == nil || !r.res.Cancelled || r.res.Signal != "KILL" || r.res.ExitCode != 137 {
			t.Fatalf("%s: %+v, want cancelled by KILL, exit 137", id, r.res)
		}
	}
	// The bound is free again.
	if r := f.exec("d", sessionwire.Exec{Command: "echo ok"}); r.stdout != "ok\n" {
		t.Fatalf("after the cancels: %+v %+v", r.res, r.err)
	}
}

// TestExecSignalTerm: TERM reaches the exec's process group (the shell's
// trap runs); a signal for an unknown exec is not_found.
func TestExecSignalTerm(t *testing.T) {
	f := newFixture(t, nil)
	f.startExec("a", sessionwire.Exec{Command: `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 1; done`})
	f.waitStarted("a")
	waitOutput(f, "a", "ready\n")
	f.send(sessionwire.Request{ID: "s", Op: sessionwire.OpSignal, Signal: &sessionwire.Signal{Target: "a", Name: sessionwire.SignalTerm}})
	r := collect(f.wait("a"))
	if r.res == nil || r.res.ExitCode != 7 || r.stdout != "ready\ngot-term\n" || r.res.Cancelled {
		t.Fatalf("got %+v %q", r.res, r.stdout)
	}
	f.send(sessionwire.Request{ID: "s2", Op: sessionwire.OpSignal, Signal: &sessionwire.Signal{Target: "nope", Name: sessionwire.SignalKill}})
	if r := collect(f.wait("s2")); r.err == nil || r.err.Code != sessionwire.ErrNotFound {
		t.Fatalf("signal of an unknown exec: %+v", r.err)
	}
}

// waitOutput waits until exec id's stdout is want.
func waitOutput(f *fixture, id, want string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if got := collect(f.frames[id]).stdout; got == want {
			return
		} else if f.final[id] {
			f.t.Fatalf("%s ended with stdout %q, want %q", id, got, want)
		}
		f.cond.Wait()
	}
}

// TestExecTimeout: the timeout kills the exec's process group, a
// background child of the same group included.
func TestExecTimeout(t *testing.T) {
	f := newFixture(t, nil)
	r := f.exec("t", sessionwire.Exec{Command: "sleep 1000 & echo $!; wait", TimeoutSeconds: 1})
	if r.res == nil || !r.res.TimedOut || r.res.ExitCode != 137 || r.res.Signal != "KILL" {
		t.Fatalf("result %+v, want timed out, killed", r.res)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("stdout %q: %v", r.stdout, err)
	}
	// The kill is delivered, not necessarily acted on yet: gone, dead,
	// a zombie, or SIGKILL pending.
	if st := procState(pid); st != "" && st != "Z" && st != "X" && !killPending(pid) {
		t.Fatalf("the background child of a timed-out exec is in state %q without SIGKILL pending", st)
	}
}

// killPending reports whether pid has SIGKILL pending (shared or its own).
func killPending(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true // gone
	}
	for _, l := range strings.Split(string(b), "\n") {
		for _, key := range []string{"ShdPnd:", "SigPnd:"} {
			if v, ok := strings.CutPrefix(l, key); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && n&(1<<(unix.SIGKILL-1)) != 0 {
					return true
				}
			}
		}
	}
	return false
}

// procState is the state letter of pid ("" when it is gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// TestExecOutputBound: output past maxOutputBytes is dropped, counted and
// reported.
func TestExecOutputBound(t *testing.T) {
	f := newFixture(t, nil)
	r := f.exec("o", sessionwire.Exec{Command: "printf 0123456789abcdef; printf xy >&2", MaxOutputBytes: 10})
	if r.stdout != "0123456789" || r.stderr != "xy" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if !r.res.StdoutTruncated || r.res.StdoutDropped != 6 || r.res.StderrTruncated || r.res.StderrDropped != 0 {
		t.Fatalf("result %+v, want stdout cut by 6 bytes, stderr whole", r.res)
	}
	// A flood bigger than the pipe: the exec is not blocked by the bound.
	r = f.exec("o2", sessionwire.Exec{Command: "head -c 1000000 /dev/zero", MaxOutputBytes: 100})
	if len(r.stdout) != 100 || r.res.StdoutDropped != 1000000-100 || r.res.ExitCode != 0 {
		t.Fatalf("flood: %d bytes, result %+v", len(r.stdout), r.res)
	}
}

// TestExecBackgroundOutlives: a background process started by an exec
// that ended is still there for the next exec, whether it let go of the
// exec's pipes or not.
func TestExecBackgroundOutlives(t *testing.T) {
	f := newFixture(t, nil)
	r := f.exec("bg", sessionwire.Exec{Command: "sleep 1000 >/dev/null 2>&1 & echo $!"})
	pid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil || r.res == nil || r.res.ExitCode != 0 {
		t.Fatalf("stdout %q result %+v: %v", r.stdout, r.res, err)
	}
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
	if r := f.exec("check", sessionwire.Exec{Command: fmt.Sprintf("kill -0 %d && echo alive", pid)}); r.stdout != "alive\n" {
		t.Fatalf("the background process did not outlive its exec: %q %q", r.stdout, r.stderr)
	}
	// This one keeps the exec's stdout: the result still comes (after
	// the drain grace) and later output is dropped.
	r = f.exec("bg2", sessionwire.Exec{Command: "(echo first; sleep 1000) & echo $!"})
	if r.res == nil || r.res.ExitCode != 0 {
		t.Fatalf("result %+v stdout %q", r.res, r.stdout)
	}
	pid2 := 0
	for _, l := range strings.Fields(r.stdout) {
		if n, err := strconv.Atoi(l); err == nil {
			pid2 = n
		}
	}
	if pid2 == 0 {
		t.Fatalf("stdout %q names no pid", r.stdout)
	}
	_ = unix.Kill(pid2, unix.SIGKILL)
	_ = unix.Kill(-pid2, unix.SIGKILL)
}

// TestExecPrivileges: a guest exec holds no capability and has
// no_new_privs; a root exec holds exactly a run's setup capabilities;
// twice over, interleaved (each kind is forked by its own thread, kept
// from one exec to the next: forker.go).
func TestExecPrivileges(t *testing.T) {
	needRoot(t)
	f := newFixture(t, nil)
	status := func(r execResult, key string) string {
		for _, l := range strings.Split(r.stdout, "\n") {
			if v, ok := strings.CutPrefix(l, key+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return "?"
	}
	for round := range 2 {
		privileges(t, f, status, round)
	}
}

func privileges(t *testing.T, f *fixture, status func(execResult, string) string, round int) {
	t.Helper()
	g := f.exec(fmt.Sprintf("g%d", round), sessionwire.Exec{Executable: "cat", Args: []string{"/proc/self/status"}})
	for key, want := range map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Groups": "",
		"Uid": fmt.Sprintf("%d\t%d\t%d\t%d", guestUID, guestUID, guestUID, guestUID)} {
		if got := status(g, key); got != want {
			t.Errorf("round %d: guest exec %s = %q, want %q", round, key, got, want)
		}
	}
	rt := f.exec(fmt.Sprintf("r%d", round), sessionwire.Exec{Executable: "cat", Args: []string{"/proc/self/status"}, Root: true})
	for key, want := range map[string]string{"CapInh": "0000000000000000", "CapBnd": "0000000000000019", "CapEff": "0000000000000019",
		"CapAmb": "0000000000000000", "NoNewPrivs": "1", "Groups": "", "Uid": "0\t0\t0\t0"} {
		if got := status(rt, key); got != want {
			t.Errorf("round %d: root exec %s = %q, want %q", round, key, got, want)
		}
	}
}

// BenchmarkExecTrue is an exec of true through the supervisor: request,
// fork and exec, result.
func BenchmarkExecTrue(b *testing.B) {
	f := newFixture(b, nil)
	b.ResetTimer()
	for i := range b.N {
		r := f.exec(fmt.Sprintf("b%d", i), sessionwire.Exec{Executable: "true"})
		if r.res == nil || r.res.ExitCode != 0 {
			b.Fatalf("result %+v %+v", r.res, r.err)
		}
	}
}

// kinds is the order of an exec's frames: "started", "out", "err",
// "result" (a run of data frames of one stream once).
func kinds(frames []sessionwire.EventFrame) []string {
	var out []string
	for _, fr := range frames {
		k := ""
		switch {
		case fr.Type == sessionwire.FrameStdout:
			k = "out"
		case fr.Type == sessionwire.FrameStderr:
			k = "err"
		case fr.Event.Kind == sessionwire.EventStarted:
			k = "started"
		case fr.Event.Kind == sessionwire.EventResult:
			k = "result"
		default:
			k = fr.Event.Kind
		}
		if len(out) == 0 || out[len(out)-1] != k {
			out = append(out, k)
		}
	}
	return out
}

// TestExecStartedOnce: an exec's started event comes once, before its
// first output and its result, whether it went with its first output,
// with its result (an exec that ended before StartedDelay) or on its own
// once StartedDelay passed.
func TestExecStartedOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		x     sessionwire.Exec
		want  []string
	}{
		{"with the result", time.Hour, sessionwire.Exec{Executable: "true"}, []string{"started", "result"}},
		{"with the first output", time.Hour, sessionwire.Exec{Command: "echo a"}, []string{"started", "out", "result"}},
		{"not found", time.Hour, sessionwire.Exec{Executable: "no-such-command-x"}, []string{"started", "err", "result"}},
		{"on its own", time.Millisecond, sessionwire.Exec{Executable: "sleep", Args: []string{"0.05"}}, []string{"started", "result"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *Options) { o.StartedDelay = tc.delay })
			f.startExec("s1", tc.x)
			if got := kinds(f.wait("s1")); !slices.Equal(got, tc.want) {
				t.Errorf("frames %v, want %v", got, tc.want)
			}
		})
	}
}

// writes records each Write on the supervisor's stdout.
type writes struct {
	mu  sync.Mutex
	all [][]byte
	res chan []byte // the write that carried a result
}

func (w *writes) Write(p []byte) (int, error) {
	b := bytes.Clone(p)
	w.mu.Lock()
	w.all = append(w.all, b)
	w.mu.Unlock()
	if bytes.Contains(b, []byte(`"kind":"result"`)) {
		w.res <- b
	}
	return len(p), nil
}

// TestExecStartedWithResultInOneWrite: an exec that ends before
// StartedDelay has its started event and its result in one write on the
// attach stream (one pass through Docker's copies, not two).
func TestExecStartedWithResultInOneWrite(t *testing.T) {
	f := newFixture(t, nil) // for its directories and ids
	w := &writes{res: make(chan []byte, 1)}
	s, err := New(Options{UID: f.uid, GID: f.gid, WorkDir: f.work, OutputDir: f.output, TmpDir: f.tmp, StartedDelay: time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, w, io.Discard, testReaper)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, inR) }()
	defer func() {
		cancel()
		inW.Close()
		<-served
		s.Close()
	}()
	if err := sessionwire.NewRequestEncoder(inW).Request(sessionwire.Request{ID: "t1", Op: sessionwire.OpExec,
		Exec: &sessionwire.Exec{Executable: "true", MaxOutputBytes: 1 << 10}}); err != nil {
		t.Fatal(err)
	}
	d := sessionwire.NewEventDecoder(bytes.NewReader(<-w.res))
	var got []string
	for {
		fr, err := d.Next()
		if err != nil {
			break
		}
		got = append(got, fr.Event.Kind)
	}
	if want := []string{sessionwire.EventStarted, sessionwire.EventResult}; !slices.Equal(got, want) {
		t.Errorf("the result's write holds %v, want %v", got, want)
	}
}
