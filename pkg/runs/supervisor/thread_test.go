package supervisor

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mainThreadEnv makes the test binary run mainThreadHelper instead of the
// tests: a call that must not leave its mark on the main thread, made from
// the main thread.
const mainThreadEnv = "SUPERVISOR_TEST_MAIN_THREAD"

// killAsRounds is how often the helper kills as a guest uid.
const killAsRounds = 10

func init() {
	if os.Getenv(mainThreadEnv) != "" {
		// Keep the main goroutine on the main thread until the helper
		// lets go of it just before the call: with one P (GOMAXPROCS=1)
		// a goroutine the call starts then runs on the main thread
		// unless something keeps it off.
		runtime.LockOSThread()
	}
}

// mainThreadHelper makes the call its environment names from the main
// thread, then prints what it saw and the status lines named in
// SUPERVISOR_TEST_FIELD of the process (the thread-group leader, first)
// and of each of its threads.
func mainThreadHelper() int {
	if unix.Gettid() != unix.Getpid() {
		fmt.Println("helper: not on the main thread")
		return 90
	}
	switch os.Getenv(mainThreadEnv) {
	case "throwaway":
		var tid int
		runtime.UnlockOSThread()
		onThrowawayThread(func() {
			tid = unix.Gettid()
			_ = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
		})
		fmt.Println("ran on the main thread:", tid == unix.Getpid())
	case "killas":
		s := &supervisor{rp: newReaper(), log: slog.New(slog.NewTextHandler(os.Stdout, nil))}
		defer s.rp.close()
		sleep, err := exec.LookPath("sleep")
		if err != nil {
			fmt.Println("helper:", err)
			return 90
		}
		// Rounds: the first from the main thread, each followed by a
		// look at every thread (a thread that took the uid may show it
		// until it ends).
		for round := 0; round < killAsRounds; round++ {
			// Should the kill fail, the victim ends by itself.
			attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Setpgid: true,
				Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}}
			pid, status, err := s.rp.start(func() (int, error) { return syscall.ForkExec(sleep, []string{"sleep", "10"}, attr) })
			if err != nil {
				fmt.Println("helper: start the victim:", err)
				return 90
			}
			if round == 0 {
				runtime.UnlockOSThread()
			}
			if err := s.killAs(65534, -pid, time.Now().Add(killTimeout)); err != nil {
				fmt.Println("killAs:", err)
			}
			ws := <-status
			fmt.Println("victim killed:", ws.Signaled() && ws.Signal() == unix.SIGKILL)
			if round < killAsRounds-1 {
				printStatusLines("Uid")
			}
		}
	default:
		fmt.Println("helper: unknown call")
		return 90
	}
	printStatusLines(os.Getenv("SUPERVISOR_TEST_FIELD"))
	return 0
}

// printStatusLines prints field's status line of the process (the
// thread-group leader), then of each of its threads.
func printStatusLines(field string) {
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, p := range append([]string{"/proc/self/status"}, tasks...) {
		fmt.Printf("%s %s\n", p, statusLine(p, field))
	}
}

func statusLine(path, field string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), field+":") {
			return sc.Text()
		}
	}
	return "no " + field + " line"
}

// runMainThreadHelper runs the helper (through argv0 and args, e.g.
// setpriv) and returns its lines.
func runMainThreadHelper(t *testing.T, call, field string, argv ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv = append(argv, exe, "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{mainThreadEnv + "=" + call, "SUPERVISOR_TEST_FIELD=" + field, "GOMAXPROCS=1", "PATH=" + os.Getenv("PATH"), childRace()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 3 {
		t.Fatalf("helper output %q lacks the threads", out)
	}
	return lines
}

// A goroutine that exits locked ends its thread, except the main thread,
// which Go parks for good with what the goroutine left on it: the
// process's own state as /proc and the kernel see it (its thread-group
// leader's). Called from the main thread, with one P, the throwaway thread
// must still be another one, and the process keeps no_new_privs off.
func TestThrowawayThreadIsNeverTheMainThread(t *testing.T) {
	for i := 0; i < 3; i++ {
		lines := runMainThreadHelper(t, "throwaway", "NoNewPrivs")
		if lines[0] != "ran on the main thread: false" {
			t.Errorf("%s, want false", lines[0])
		}
		if want := "/proc/self/status NoNewPrivs:\t0"; lines[1] != want {
			t.Errorf("%s, want %s", lines[1], want)
		}
	}
}

// killAs kills as the guest's uid without any thread of the supervisor
// taking that uid: a thread with it lets the guest signal the supervisor
// (kill(2) takes any thread's id), and the main thread would keep it for
// good, the process then being the guest's for the kernel. Run as in a
// container (root without CAP_KILL, so only the uid switch lets the kill
// through), from the main thread, with one P.
func TestKillAsLeavesEveryThreadRoot(t *testing.T) {
	requireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	lines := runMainThreadHelper(t, "killas", "Uid", setpriv, "--inh-caps=-all", "--bounding-set=-all,"+setupCaps, "--")
	killed := 0
	for _, l := range lines {
		switch {
		case l == "victim killed: true":
			killed++
		case strings.HasPrefix(l, "/proc/self/") && strings.HasSuffix(l, " Uid:\t0\t0\t0\t0"):
		default:
			t.Errorf("%s, want every victim killed and uids 0 0 0 0 everywhere (the process is /proc/self/status)", l)
		}
	}
	if killed != killAsRounds {
		t.Errorf("%d victims killed, want %d", killed, killAsRounds)
	}
}
