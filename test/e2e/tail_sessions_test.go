package e2e

// Sessions (DESIGN.md section 18, docs/api.md Sessions; issue 36) end to
// end: the installed host, the small toolbox built in the namespace, the
// real CLI run as client uids (members of sandbox-clients made here; the
// namespace's /etc vanishes with it) and, for the hostile execs, the Go
// client. This file sorts after tail_runstandby_test.go.
//
// What is not here: network execs (approved with a credential, a
// background process refused after its exec, denied) are in
// tail_sessionnet_test.go.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// sessionsConfig: a short idle pause (sessions.idleSeconds' least) and a
// small /work, so that the idle scenario and the fill scenario are quick.
func sessionsConfig() cfg {
	c := baseConfig()
	c.SessionIdle = 10
	c.SessionWorkMb = 48
	return c
}

// clientUser is a uid of the sandbox-clients group (a client, no admin).
type clientUser struct {
	name     string
	uid, gid uint32
	groups   []uint32
}

// sessionClient makes (once per namespace) and returns a client user.
func sessionClient(t *testing.T, name string) clientUser {
	t.Helper()
	if _, err := user.Lookup(name); err != nil {
		if out, err := run("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", "sandbox-clients", name); err != nil {
			t.Fatalf("useradd %s: %v\n%s", name, err, out)
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	g, err := user.LookupGroup("sandbox-clients")
	if err != nil {
		t.Fatal(err)
	}
	num := func(s string) uint32 {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			t.Fatalf("%s: %q: %v", name, s, err)
		}
		return uint32(n)
	}
	return clientUser{name: name, uid: num(u.Uid), gid: num(u.Gid), groups: []uint32{num(g.Gid)}}
}

// cli runs the real CLI as u; stdout and stderr apart.
func (u clientUser) cli(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/sandbox-host", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	cmd.Dir = "/"
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// create makes a session owned by u and closes it (as an admin) when the
// test ends, whatever happened.
func (u clientUser) create(t *testing.T) string {
	t.Helper()
	out, errOut, err := u.cli("session", "create")
	id := strings.TrimSpace(out)
	if err != nil || len(id) != 32 {
		t.Fatalf("%s: session create: %v\n%s%s", u.name, err, out, errOut)
	}
	t.Cleanup(func() { _, _ = cli("session", "close", id) })
	return id
}

// exec runs argv (after --) in session id as u and fails the test unless
// it exits 0; its stdout.
func (u clientUser) exec(t *testing.T, id string, flags []string, argv ...string) string {
	t.Helper()
	args := append(append([]string{"session", "exec"}, flags...), id, "--")
	out, errOut, err := u.cli(append(args, argv...)...)
	if err != nil {
		t.Fatalf("%s: session exec %s %q: %v\nstdout: %s\nstderr: %s", u.name, id, argv, err, out, errOut)
	}
	return out
}

// show is session id as u sees it.
func (u clientUser) show(t *testing.T, id string) (apiwire.Session, error) {
	t.Helper()
	out, errOut, err := u.cli("--json", "session", "show", id)
	if err != nil {
		return apiwire.Session{}, fmt.Errorf("%w: %s%s", err, strings.TrimSpace(out), errOut)
	}
	var st apiwire.Session
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("session show %s: %v\n%s", id, err, out)
	}
	return st, nil
}

// sessionContainer is the container of session id ("" when there is none).
func sessionContainer(t *testing.T, id string) (name, state string) {
	t.Helper()
	for _, c := range containers(t) {
		if c.Labels[layout.LabelTurn] == id {
			return strings.Join(c.Names, ","), c.State
		}
	}
	return "", ""
}

// pausedByDocker is docker inspect's State.Paused of session id's container.
func pausedByDocker(t *testing.T, id string) bool {
	t.Helper()
	name, _ := sessionContainer(t, id)
	if name == "" {
		t.Fatalf("session %s has no container", id)
	}
	ins, err := env.docker.ContainerInspect(context.Background(), strings.TrimPrefix(name, "/"))
	if err != nil || ins.State == nil {
		t.Fatalf("docker inspect %s: %v", name, err)
	}
	return ins.State.Paused
}

// makeWheel writes the scenarios' wheel (test/e2e/mkwheel) into dir.
func makeWheel(t *testing.T, dir, marker string) string {
	t.Helper()
	out, err := run(filepath.Join(env.bin, "mkwheel"), "-out", dir, "-marker", marker)
	if err != nil {
		t.Fatalf("mkwheel: %v\n%s", err, out)
	}
	return strings.TrimSpace(out)
}

// sharedDir is a directory every uid may write (t.TempDir's parent is
// root's alone).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "roundtable-e2e-session-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestSessionFromCLI: a client uid drives one session through the CLI:
// a wheel installed into /work by one exec is imported by the next; a dev
// server left in the background by one exec answers the next; 8 MiB of
// random bytes in and 8 MiB out, checksums compared; the session pauses
// when idle (docker says paused) and the next exec resumes it with its
// files and its background server intact; another client cannot see it,
// an admin can; its output is in the journal as sandbox/session-<id>, the
// host logs each lifecycle event; after close nothing is left.
func TestSessionFromCLI(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	withConfig(t, sessionsConfig())
	alice, bob := sessionClient(t, "e2e-sess-alice"), sessionClient(t, "e2e-sess-bob")
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	local := sharedDir(t)
	marker := "WHEEL-" + randHex(4)
	wheel := makeWheel(t, local, marker)

	start := time.Now()
	id := alice.create(t)
	t.Logf("session %s created in %s", id, time.Since(start))
	if st, err := alice.show(t, id); err != nil || st.State != apiwire.SessionRunning || st.OwnerUID != int(alice.uid) {
		t.Fatalf("session show: %+v %v", st, err)
	}

	t.Run("wheel", func(t *testing.T) {
		if _, errOut, err := alice.cli("session", "cp", wheel, id+":"+filepath.Base(wheel)); err != nil {
			t.Fatalf("session cp of the wheel: %v\n%s", err, errOut)
		}
		out := alice.exec(t, id, nil, "sh", "-c", `set -e
w=greet-1.0-py3-none-any.whl
if python3 -m pip --version >/dev/null 2>&1; then
  python3 -m pip install --no-index --no-deps --no-cache-dir --target site "$w" >/dev/null && echo INSTALLED-BY-PIP
else
  python3 -m zipfile -e "$w" site && echo INSTALLED-BY-UNZIP
fi
ls site`)
		t.Logf("install exec: %s", strings.TrimSpace(out))
		if !strings.Contains(out, "INSTALLED-BY-") || !strings.Contains(out, "greet-1.0.dist-info") {
			t.Fatalf("the wheel was not installed into /work/site:\n%s", out)
		}
		out = alice.exec(t, id, []string{"--cwd", "site"}, "python3", "-c", "import greet; print(greet.hello('e2e'))")
		if want := "hello e2e from greet " + marker; strings.TrimSpace(out) != want {
			t.Errorf("the second exec imported %q, want %q", out, want)
		}
	})

	page := "DEV-SERVER-" + randHex(4)
	t.Run("dev-server", func(t *testing.T) {
		// The first exec leaves the server in the background and returns
		// once it answers (the guest waits for it, not this test).
		out := alice.exec(t, id, nil, "sh", "-c", `set -e
mkdir -p www && echo "$1" > www/index.html
nohup python3 -m http.server 8765 --bind 127.0.0.1 --directory /work/www >/tmp/http.log 2>&1 &
echo "server pid $!"
for i in $(seq 1 100); do curl -sf http://127.0.0.1:8765/index.html >/dev/null && exit 0; sleep 0.1; done
echo "the server did not answer"; exit 1`, "sh", page)
		t.Logf("first exec: %s", strings.TrimSpace(out))
		out = alice.exec(t, id, nil, "curl", "-sf", "http://127.0.0.1:8765/index.html")
		if strings.TrimSpace(out) != page {
			t.Errorf("the next exec got %q from the background server, want %q", out, page)
		}
	})

	blob := make([]byte, 8<<20)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	t.Run("files-8MiB", func(t *testing.T) {
		in := filepath.Join(local, "in.bin")
		if err := os.WriteFile(in, blob, 0o644); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if _, errOut, err := alice.cli("session", "cp", in, id+":blob.bin"); err != nil {
			t.Fatalf("session cp in: %v\n%s", err, errOut)
		}
		t.Logf("8 MiB in: %s", time.Since(began))
		out := alice.exec(t, id, nil, "sh", "-c", "sha256sum blob.bin | cut -c1-64; head -c 8388608 /dev/urandom > /output/out.bin; sha256sum /output/out.bin | cut -c1-64")
		sums := strings.Fields(out)
		if len(sums) != 2 || sums[0] != sha256Hex(blob) {
			t.Fatalf("the session's checksum of the 8 MiB put is %v, want %s", sums, sha256Hex(blob))
		}
		outFile := filepath.Join(local, "out.bin")
		began = time.Now()
		if _, errOut, err := alice.cli("session", "cp", id+":/output/out.bin", outFile); err != nil {
			t.Fatalf("session cp out: %v\n%s", err, errOut)
		}
		t.Logf("8 MiB out: %s", time.Since(began))
		got, err := os.ReadFile(outFile)
		if err != nil || len(got) != 8<<20 || sha256Hex(got) != sums[1] {
			t.Errorf("the 8 MiB got: %d bytes, sha256 %s, want %s (%v)", len(got), sha256Hex(got), sums[1], err)
		}
		out, errOut, err := alice.cli("session", "ls", id)
		if err != nil || !strings.Contains(out, fmt.Sprintf("%10d %q", 8<<20, "blob.bin")) {
			t.Errorf("session ls: %v\n%s%s", err, out, errOut)
		}
	})

	t.Run("idle-pause-resume", func(t *testing.T) {
		// sessions.idleSeconds is 10: the host pauses it (docker pause).
		if msg := eventually(45*time.Second, func() string {
			if _, state := sessionContainer(t, id); state != "paused" {
				return "container state " + state
			}
			return ""
		}); msg != "" {
			t.Fatalf("the idle session was not paused: %s", msg)
		}
		if !pausedByDocker(t, id) {
			t.Fatalf("docker ps says paused, docker inspect does not")
		}
		st, err := alice.show(t, id)
		if err != nil || st.State != apiwire.SessionPaused {
			t.Fatalf("show of the paused session: %+v %v", st, err)
		}
		if !pausedByDocker(t, id) {
			t.Fatalf("show resumed the session: only a request that needs it should")
		}
		resumes := st.Resumes
		began := time.Now()
		out := alice.exec(t, id, nil, "sh", "-c", "curl -sf http://127.0.0.1:8765/index.html; sha256sum blob.bin | cut -c1-64")
		t.Logf("exec on the paused session: %s", time.Since(began))
		if f := strings.Fields(out); len(f) != 2 || f[0] != page || f[1] != sha256Hex(blob) {
			t.Errorf("after the resume the server and /work are not what they were: %q", out)
		}
		st, err = alice.show(t, id)
		if err != nil || st.Resumes != resumes+1 || st.State != apiwire.SessionRunning || pausedByDocker(t, id) {
			t.Errorf("after the exec: %+v %v, want running (docker: not paused) with %d resumes", st, err, resumes+1)
		}
	})

	t.Run("owner-only", func(t *testing.T) {
		if _, errOut, err := bob.cli("session", "show", id); err == nil || !strings.Contains(errOut, "no such session") {
			t.Errorf("another client's show of the session: %v %s, want no such session", err, errOut)
		}
		if _, errOut, err := bob.cli("session", "exec", id, "--", "true"); err == nil || !strings.Contains(errOut, "no such session") {
			t.Errorf("another client's exec in the session: %v %s, want no such session", err, errOut)
		}
		if out, errOut, _ := bob.cli("session", "list"); strings.Contains(out, id) {
			t.Errorf("another client lists the session: %s%s", out, errOut)
		}
		if out, err := cli("session", "list"); err != nil || !strings.Contains(out, id) {
			t.Errorf("an admin does not list the session: %v\n%s", err, out)
		}
	})

	if out, errOut, err := alice.cli("session", "close", id); err != nil {
		t.Fatalf("session close: %v\n%s%s", err, out, errOut)
	}
	if _, err := alice.show(t, id); err == nil || !strings.Contains(err.Error(), "no such session") {
		t.Errorf("show after close: %v, want no such session", err)
	}
	if name, state := sessionContainer(t, id); name != "" {
		t.Errorf("the closed session's container %s is still there (%s)", name, state)
	}
	t.Run("journal", func(t *testing.T) {
		if msg := eventually(10*time.Second, func() string {
			if j := journal("-t", "sandbox/session-"+id, "-o", "cat"); !strings.Contains(j, "hello e2e from greet "+marker) || !strings.Contains(j, page) {
				return "journalctl -t sandbox/session-" + id + " lacks the execs' output:\n" + j
			}
			return ""
		}); msg != "" {
			t.Error(msg)
		}
		host := journal("-u", layout.HostService, "--since", since, "-o", "cat", "-g", id)
		for _, event := range []string{"session admitted", "session started", "session paused", "session resumed", "session close requested", "session closed"} {
			if !strings.Contains(host, event) {
				t.Errorf("the host logged no %q line for session %s:\n%s", event, id, host)
			}
		}
	})
	assertNothingLeft(t, "after a closed session")
}

// TestSessionHostileExecs: a guest exec that kills the supervisor, writes
// into its stream, floods output, fork-bombs or fills the work directory
// (each in a session of its own, another client's) ends its session or
// fails; the host stays healthy and a victim session of another client
// keeps its files and its background process, untouched, through all of
// them.
func TestSessionHostileExecs(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	withConfig(t, sessionsConfig())
	alice, mallory := sessionClient(t, "e2e-sess-alice"), sessionClient(t, "e2e-sess-mallory")
	victim := alice.create(t)
	secret := "VICTIM-" + randHex(6)
	alice.exec(t, victim, nil, "sh", "-c", `echo "$1" > secret.txt; nohup sleep 100000 >/dev/null 2>&1 & echo $! > sleeper.pid`, "sh", secret)
	victimIntact := func(t *testing.T, after string) {
		t.Helper()
		if s := unitActive(layout.HostService); s != "active" {
			t.Fatalf("after %s the host is %s", after, s)
		}
		if r := api("GET", "/v1/health", nil); r.Err != nil || r.Status != 200 {
			t.Errorf("after %s the host's health: %s", after, r)
		}
		out := alice.exec(t, victim, nil, "sh", "-c", `cat secret.txt; kill -0 "$(cat sleeper.pid)" && echo SLEEPER-ALIVE`)
		if !strings.Contains(out, secret) || !strings.Contains(out, "SLEEPER-ALIVE") {
			t.Errorf("after %s the victim session lost its file or background process: %q", after, out)
		}
	}
	hc := client.New(hostSocket)
	// attack runs script in a fresh session of mallory's (root: as the
	// session's root) and reports how it ended: the exec's result (or the
	// error that replaced it), and whether the session still serves an
	// exec after it (ended: the host no longer knows it). The session is
	// closed after; its container must be gone.
	type outcome struct {
		res            apiwire.SessionExecResult
		stdout, stderr []byte
		err            error
		ended          bool
	}
	attack := func(t *testing.T, root bool, timeout int, script string) (o outcome) {
		t.Helper()
		id := mallory.create(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		o.res, o.err = hc.Exec(ctx, id, apiwire.SessionExec{Command: script, Root: root, TimeoutSeconds: timeout}, func(ev apiwire.SessionExecEvent) error {
			switch {
			case ev.Type == apiwire.ExecStdout:
				o.stdout = append(o.stdout, ev.Data...)
			case ev.Type == apiwire.ExecStderr && len(o.stderr) < 512:
				o.stderr = append(o.stderr, ev.Data...)
			}
			return nil
		})
		out, errOut, err := mallory.cli("session", "exec", "--timeout", "20", id, "--", "echo", "still-serving")
		switch {
		case err == nil && strings.TrimSpace(out) == "still-serving":
		case strings.Contains(errOut, "no such session") || strings.Contains(errOut, "the session ended"):
			o.ended = true
		default:
			t.Logf("after the attack the session is known but its exec fails: %v %s%s", err, out, errOut)
		}
		if out, errOut, err := mallory.cli("session", "close", id); err != nil && !strings.Contains(errOut, "no such session") {
			t.Errorf("close of the attacked session: %v %s%s", err, out, errOut)
		}
		if msg := eventually(15*time.Second, func() string {
			if name, state := sessionContainer(t, id); name != "" {
				return "container " + name + " " + state
			}
			return ""
		}); msg != "" {
			t.Errorf("the attacked session's container outlived it: %s", msg)
		}
		lines := strings.Split(strings.TrimSpace(journal("-u", layout.HostService, "-o", "cat", "-g", "session="+id)), "\n")
		t.Logf("session %s: exit %d signal %q timed out %v, err %v, ended %v; stderr %q; the host's lines:\n%s", id, o.res.ExitCode, o.res.Signal,
			o.res.TimedOut, o.err, o.ended, o.stderr[:min(len(o.stderr), 200)], strings.Join(lines[max(0, len(lines)-12):], "\n"))
		return o
	}

	t.Run("kill-supervisor", func(t *testing.T) {
		// PID 1 of the container is the supervisor, root: the guest's
		// kill is refused. The session's root may signal it: SIGKILL from
		// inside a PID namespace never reaches its init; SIGTERM and
		// SIGINT end the session at most.
		if o := attack(t, false, 30, "kill -KILL 1; kill -TERM 1"); o.err == nil && o.res.ExitCode == 0 && !o.ended {
			t.Errorf("the guest's kill of the supervisor succeeded and the session goes on")
		}
		attack(t, true, 30, "kill -KILL 1; kill -TERM 1; kill -INT 1; sleep 5; echo SURVIVED")
		victimIntact(t, "a root exec signalled its supervisor")
	})
	t.Run("stream-injection", func(t *testing.T) {
		// The supervisor's stdout is the host's framed stream: garbage
		// written into it ends the session (sessionwire refuses it), or
		// the write is refused.
		if o := attack(t, true, 30, "printf 'NOT-A-FRAME-%.0s' $(seq 1 2000) > /proc/1/fd/1 && echo WROTE"); o.err == nil && o.res.ExitCode == 0 && !o.ended {
			t.Errorf("garbage went into the supervisor's stream and the session goes on as if nothing happened")
		}
		victimIntact(t, "an exec wrote into its supervisor's stream")
	})
	t.Run("flood-output", func(t *testing.T) {
		o := attack(t, false, 60, "head -c 67108864 /dev/zero; head -c 67108864 /dev/zero >&2; echo FLOOD-DONE >&2")
		if o.err != nil {
			t.Fatalf("flooding exec: %v", o.err)
		}
		t.Logf("flood: %d stdout bytes through, dropped %d/%d", len(o.stdout), o.res.StdoutDropped, o.res.StderrDropped)
		if !o.res.StdoutTruncated || !o.res.StderrTruncated || len(o.stdout) > 1<<20 || o.res.StdoutDropped < 60<<20 {
			t.Errorf("64 MiB on each stream was not cut at sessions.maxOutputBytes (1 MiB): %+v, %d bytes through", o.res, len(o.stdout))
		}
		victimIntact(t, "an exec flooded its output")
	})
	t.Run("fork-bomb", func(t *testing.T) {
		// The classic bomb backgrounds itself: its exec may well end
		// (exit 0) while the bomb goes on, bounded by sessions.pids, as a
		// background process of the session until its close.
		attack(t, false, 10, "bomb() { bomb | bomb & }; bomb; sleep 3; echo BOMB-EXEC-END")
		victimIntact(t, "a fork bomb")
	})
	t.Run("fill-work", func(t *testing.T) {
		o := attack(t, false, 60, "head -c 209715200 /dev/zero > fill; echo rc=$?; df -k /work | tail -1; exit 3")
		if o.err == nil && !strings.Contains(string(o.stdout), "rc=1") {
			t.Errorf("writing 200 MiB into a 48 MiB /work did not fail: %s", o.stdout)
		}
		victimIntact(t, "an exec filled its work directory")
	})

	if out, errOut, err := alice.cli("session", "close", victim); err != nil {
		t.Errorf("close the victim: %v %s%s", err, out, errOut)
	}
	assertNothingLeft(t, "after the hostile execs")
}

// TestSessionHostKilledThenReaped: the host is SIGKILLed while a session
// with a background process lives and is kept down: the supervisor exits
// with its attach stream (fail closed: the container stops) and one
// reaper run removes what is left. (A session's TTL is at least 60 s; with the host down no
// session can be live, so the reaper removes it without waiting for its
// deadline label.)
func TestSessionHostKilledThenReaped(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	withConfig(t, sessionsConfig())
	alice := sessionClient(t, "e2e-sess-alice")
	id := alice.create(t)
	alice.exec(t, id, nil, "sh", "-c", "nohup sleep 100000 >/dev/null 2>&1 &")
	var created time.Time
	for _, c := range containers(t) {
		if c.Labels[layout.LabelTurn] == id {
			created = time.Unix(c.Created, 0)
			if c.Labels[layout.LabelDeadline] == "" {
				t.Errorf("the session's container has no deadline label: %v", c.Labels)
			}
		}
	}
	if created.IsZero() {
		t.Fatalf("session %s has no container", id)
	}
	systemctl(t, "kill", "--kill-who=main", "--signal=SIGKILL", layout.HostService)
	systemctl(t, "stop", layout.HostService)
	if name, _ := sessionContainer(t, id); name == "" {
		t.Fatalf("the killed host left no container of session %s: the scenario proves nothing", id)
	}
	// Fail closed: with the attach stream gone the supervisor's stdin
	// ends, it exits and the container with it (background process
	// included), long before the reaper comes.
	if msg := eventually(20*time.Second, func() string {
		if _, state := sessionContainer(t, id); state != "exited" {
			return "container state " + state
		}
		return ""
	}); msg != "" {
		t.Errorf("the session's container still runs after its host was killed: %s", msg)
	}
	// The reaper leaves what was created during its pass (Created has
	// one-second resolution).
	if wait := time.Until(created.Add(2 * time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	systemctl(t, "start", layout.ReaperUnit)
	assertEmpty(t, "after one run of the reaper")
	restartHost(t)
	if _, err := alice.show(t, id); err == nil {
		t.Errorf("the restarted host still knows session %s", id)
	}
}

// mcpSessionClient runs test/peers/mcp-session-client.mjs (the official MCP
// TypeScript SDK) against `sandbox-host mcp`: steps is its --steps JSON.
func mcpSessionClient(t *testing.T, steps string) map[string]any {
	t.Helper()
	peers := os.Getenv("E2E_PEERS")
	if peers == "" {
		t.Skip("E2E_PEERS unset: test/peers/node_modules missing (npm ci --prefix test/peers)")
	}
	cmd := exec.Command("node", filepath.Join(peers, "mcp-session-client.mjs"), "--steps", steps, "--", "/usr/bin/sandbox-host", "mcp")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("mcp-session-client exited %d\nstderr: %s\nstdout: %s", ee.ExitCode(), stderr.String(), out)
		}
		t.Fatalf("mcp-session-client: %v", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("mcp-session-client output: %v\n%s", err, out)
	}
	return doc
}

// TestSessionFromMCPClient: a real MCP client (the official TypeScript
// SDK) lists the session tools and drives one session through `sandbox-host
// mcp`: start, write a file, two execs (the second sees what the first
// left), read a file, close; nothing is left.
func TestSessionFromMCPClient(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	steps := `[
 {"tool":"sandbox_session_start","arguments":{}},
 {"tool":"sandbox_write_file","arguments":{"session_id":"$SESSION","path":"calc.py","content":"print(6*7)\n"}},
 {"tool":"sandbox_exec","arguments":{"session_id":"$SESSION","command":"python3 calc.py > answer.txt && echo FIRST-EXEC"}},
 {"tool":"sandbox_exec","arguments":{"session_id":"$SESSION","command":"echo SECOND-EXEC-$(cat answer.txt)"}},
 {"tool":"sandbox_read_file","arguments":{"session_id":"$SESSION","path":"answer.txt"}},
 {"tool":"sandbox_exec","arguments":{"session_id":"$SESSION","command":"exit 3"}},
 {"tool":"sandbox_session_close","arguments":{"session_id":"$SESSION"}}
]`
	doc := mcpSessionClient(t, steps)
	var names []string
	for _, tl := range doc["tools"].([]any) {
		names = append(names, fmt.Sprint(tl.(map[string]any)["name"]))
	}
	for _, want := range []string{"sandbox_run", "sandbox_session_start", "sandbox_exec", "sandbox_write_file", "sandbox_read_file", "sandbox_session_close"} {
		if !strings.Contains(","+strings.Join(names, ",")+",", ","+want+",") {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}
	id, _ := doc["session"].(string)
	results, _ := doc["results"].([]any)
	if len(id) != 32 || len(results) != 7 {
		t.Fatalf("session %q, %d results: %v", id, len(results), doc)
	}
	want := []struct {
		text    string
		isError bool
	}{{id, false}, {"wrote 11 bytes", false}, {"FIRST-EXEC", false}, {"SECOND-EXEC-42", false}, {"42\n", false}, {"exit code 3", true}, {"session closed", false}}
	for i, w := range want {
		res, _ := results[i].(map[string]any)
		got := toolText(res)
		if !strings.Contains(got, w.text) || (res["isError"] == true) != w.isError {
			t.Errorf("step %d: isError %v %q, want isError %v and %q", i, res["isError"], got, w.isError, w.text)
		}
	}
	if _, err := cli("session", "show", id); err == nil {
		t.Errorf("the session the MCP client closed is still there")
	}
	if msg := eventually(10*time.Second, func() string {
		if !strings.Contains(journal("-t", "sandbox/session-"+id, "-o", "cat"), "SECOND-EXEC-42") {
			return "journalctl -t sandbox/session-" + id + " lacks the second exec's output"
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
	assertNothingLeft(t, "after an MCP-driven session")
}
