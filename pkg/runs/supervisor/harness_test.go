package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// The tests run the supervisor in a child process (this test binary again,
// see TestMain), as it runs in a container: as root, PID 1 of a new PID
// namespace (its own /proc mounted in a new mount namespace), so kill(-1)
// and orphan reaping are the real ones and nothing else on the machine is
// in reach. Without root the child runs as this user, not as PID 1.
const helperEnv = "SUPERVISOR_TEST_HELPER"

// setupCaps is the capability set a run with setup starts with
// (RunContainer's CapAdd after CapDrop ALL), as setpriv names it, and its
// mask; setupCommandCapsMask is SetupCommandCapabilities' (chown, fowner,
// fsetid), all a setup command holds.
const (
	setupCaps            = "+chown,+dac_override,+fowner,+fsetid,+setuid,+setgid,+setpcap"
	setupCapsMask        = "00000000000001db"
	setupCommandCapsMask = "0000000000000019"
)

// childRace is the GORACE of the child test binaries (the supervisor, the
// main-thread helper): under -race, a clean os.Exit first waits
// atexit_sleep_ms, 1 s by default, for goroutines that might still race,
// per child, and a child test runs a supervisor or more. A child still
// reports a race when it happens and then exits 66. The caller's own GORACE
// comes after it and wins.
func childRace() string { return "GORACE=atexit_sleep_ms=0 " + os.Getenv("GORACE") }

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain())
	}
	if len(os.Args) == 3 && os.Args[1] == KillArg {
		// The straggler killer (see killAs). Not os.Exit: under -race it
		// waits a second at exit for reports, per killer.
		syscall.Exit(KillMain(os.Args[2]))
	}
	if os.Getenv(mainThreadEnv) != "" {
		os.Exit(mainThreadHelper())
	}
	os.Exit(m.Run())
}

func helperMain() int {
	if os.Getenv("SUP_MOUNT_PROC") == "1" {
		// A private mount namespace (Cloneflags): mount a /proc of this
		// PID namespace so children see only its processes.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			fmt.Fprintln(os.Stderr, "helper: make / private:", err)
			return 90
		}
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			fmt.Fprintln(os.Stderr, "helper: mount /proc:", err)
			return 90
		}
		// The project's gate is a read-only bind, as in a container.
		if g := os.Getenv("SUP_GATE"); g != "" && os.Getenv("SUP_GATE_RW") != "1" {
			gate := filepath.Dir(g)
			if err := unix.Mount(gate, gate, "", unix.MS_BIND, ""); err != nil {
				fmt.Fprintln(os.Stderr, "helper: bind the gate:", err)
				return 90
			}
			if err := unix.Mount("", gate, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				fmt.Fprintln(os.Stderr, "helper: make the gate read-only:", err)
				return 90
			}
		}
	}
	if os.Getenv("SUP_CONTAINER_CAPS") == "1" {
		// Start again with a container's setup capabilities: the bounding
		// set (and so, for root, the permitted and effective sets) of
		// Docker's CapDrop ALL + CapAdd, no_new_privs.
		os.Unsetenv("SUP_CONTAINER_CAPS")
		os.Unsetenv("SUP_MOUNT_PROC")
		setpriv := os.Getenv("SUP_SETPRIV")
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper: executable:", err)
			return 90
		}
		err = unix.Exec(setpriv, []string{"setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all," + setupCaps,
			"--", self, "-test.run=^$"}, os.Environ())
		fmt.Fprintln(os.Stderr, "helper: exec setpriv:", err)
		return 90
	}
	o := Options{
		OutputDir:    os.Getenv("SUP_OUTPUT"),
		Workspace:    os.Getenv("SUP_WORKSPACE"),
		ProjectGate:  os.Getenv("SUP_GATE"),
		BrokerSocket: os.Getenv("SUP_BROKER"),
		BridgeAddr:   os.Getenv("SUP_BRIDGE"),
		CABundle:     os.Getenv("SUP_CABUNDLE"),
		SystemRoots:  os.Getenv("SUP_ROOTS"),
		DrainTimeout: 2 * time.Second,
	}
	if f := os.Getenv("SUP_AFTERKILL"); f != "" {
		o.afterKill = func() {
			// Is any other process left in this PID namespace?
			state := "alone"
			if err := unix.Kill(-1, 0); !errors.Is(err, unix.ESRCH) {
				state = fmt.Sprintf("others (%v)", err)
			}
			_ = os.WriteFile(f, []byte(state), 0o644)
			time.Sleep(time.Second) // a surviving straggler would act now
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return Main(ctx, os.Stdin, os.Stdout, os.Stderr, o)
}

func isRoot() bool { return os.Geteuid() == 0 }

func requireRoot(t *testing.T) {
	t.Helper()
	if !isRoot() {
		t.Skip("needs root (a user switch, capabilities, a PID namespace); run the tests as root")
	}
}

// dirs are a run's output directory and workspace, open to the job's user,
// and the project behind its gate for a run with setup (project, in the
// gate gate: as the host makes it when the tests are root, the job's
// uid:gid, mode 0700; the helper binds it read-only).
type dirs struct{ output, workspace, base, gate, project string }

func newDirs(t *testing.T) dirs {
	t.Helper()
	base, err := os.MkdirTemp("", "supervisor-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	d := dirs{output: filepath.Join(base, "output"), workspace: filepath.Join(base, "workspace"), base: base, gate: filepath.Join(base, "gate")}
	d.project = filepath.Join(d.gate, "workspace")
	for _, p := range []string{d.output, d.workspace, d.gate, d.project} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, mode := range map[string]os.FileMode{base: 0o755, d.output: 0o777, d.gate: 0o700} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if isRoot() {
		if err := os.Chown(d.gate, baseJob().UID, baseJob().GID); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// baseJob runs as nobody when the tests are root, else as this user.
func baseJob() wire.Job {
	j := wire.Job{UID: os.Geteuid(), GID: os.Getegid(), MaxOutputBytes: 1 << 20, MaxArtifactBytes: 1 << 20, MaxArtifactTotalBytes: 4 << 20}
	if isRoot() {
		j.UID, j.GID = 65534, 65534
	}
	return j
}

type runConfig struct {
	d         dirs
	broker    string
	afterKill string // file the afterKill hook writes
	asUser    *syscall.Credential
	stdin     []byte // raw stdin instead of the job
	// containerCaps runs the supervisor as root with only the setup
	// capabilities (no CAP_KILL, CAP_SYS_ADMIN ...) and no_new_privs.
	containerCaps bool
	// gateWritable leaves the gate writable (not bound read-only).
	gateWritable bool
	signalAt     time.Duration
}

type outcome struct {
	code      int
	out       map[string]string // "stdout/main" -> text
	phases    []wire.PhaseEnd
	artifacts []wire.ArtifactHeader
	data      map[string][]byte
	result    wire.Result
	firstOut  time.Duration // first output frame after start
	elapsed   time.Duration
	log       string
}

// run starts the supervisor with job (or cfg.stdin) and decodes its stream.
func run(t *testing.T, job wire.Job, cfg runConfig) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.asUser != nil {
		exe = copyExecutable(t, exe, cfg.d.base)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = []string{helperEnv + "=1", "SUP_OUTPUT=" + cfg.d.output, "SUP_WORKSPACE=" + cfg.d.workspace,
		"SUP_GATE=" + cfg.d.project, "SUP_BROKER=" + cfg.broker, "SUP_BRIDGE=127.0.0.1:0", "SUP_AFTERKILL=" + cfg.afterKill,
		"SUP_CABUNDLE=" + filepath.Join(cfg.d.base, "egress", "ca-bundle.pem"), "SUP_ROOTS=" + filepath.Join(cfg.d.base, "roots.pem"),
		childRace()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if isRoot() {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
		if cfg.asUser == nil {
			cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
			cmd.Env = append(cmd.Env, "SUP_MOUNT_PROC=1")
		}
		if cfg.gateWritable {
			cmd.Env = append(cmd.Env, "SUP_GATE_RW=1")
		}
		if cfg.containerCaps {
			setpriv, err := exec.LookPath("setpriv")
			if err != nil {
				t.Fatal(err)
			}
			cmd.Env = append(cmd.Env, "SUP_CONTAINER_CAPS=1", "SUP_SETPRIV="+setpriv)
		}
	}
	cmd.SysProcAttr.Credential = cfg.asUser
	var stdin bytes.Buffer
	if cfg.stdin != nil {
		stdin.Write(cfg.stdin)
	} else if err := wire.WriteJob(&stdin, job); err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = &stdin
	var logBuf bytes.Buffer
	cmd.Stderr = &logBuf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if cfg.signalAt > 0 {
		time.AfterFunc(cfg.signalAt, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	}
	o := outcome{out: map[string]string{}, data: map[string][]byte{}}
	dec := wire.NewDecoder(stdout, wire.LimitsFor(job))
	var derr error
	for {
		f, err := dec.Next()
		if err != nil {
			if err != io.EOF {
				derr = err
			}
			break
		}
		switch f.Type {
		case wire.FrameStdout, wire.FrameStderr:
			if o.firstOut == 0 {
				o.firstOut = time.Since(start)
			}
			o.out[f.Type.String()+"/"+f.Phase] += string(f.Data)
		case wire.FramePhase:
			o.phases = append(o.phases, f.PhaseEnd)
		case wire.FrameArtifact:
			o.artifacts = append(o.artifacts, f.Artifact)
		case wire.FrameArtifactData:
			o.data[f.Artifact.Path] = append(o.data[f.Artifact.Path], f.Data...)
		case wire.FrameResult:
			o.result = f.Result
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	o.elapsed = time.Since(start)
	o.log = logBuf.String()
	o.code = cmd.ProcessState.ExitCode()
	if derr != nil {
		t.Fatalf("decoding the supervisor's stream: %v (wait: %v; log: %s)", derr, werr, o.log)
	}
	return o
}

// copyExecutable copies the test binary where another user can run it.
func copyExecutable(t *testing.T, exe, dir string) string {
	t.Helper()
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "supervisor.test")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func (o outcome) artifact(path string) (wire.ArtifactHeader, bool) {
	for _, a := range o.artifacts {
		if a.Path == path {
			return a, true
		}
	}
	return wire.ArtifactHeader{}, false
}

func itoa(i int) string { return strconv.Itoa(i) }
