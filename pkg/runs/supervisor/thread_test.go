package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The main-thread helper (SUP_MAIN_THREAD) starts on the main thread: a
// LockOSThread in init keeps the main goroutine there.
func init() {
	if os.Getenv(helperEnv) == "1" && os.Getenv("SUP_MAIN_THREAD") == "1" {
		runtime.LockOSThread()
	}
}

// TestKillAsLeavesTheMainThreadRoot: killAs's uid change never lands on the
// main thread, whose credentials are the process's in /proc and for kill(2).
// The helper calls killAs from the main thread with one P (GOMAXPROCS=1),
// so the goroutine killAs starts runs on the main thread as soon as the
// caller blocks; a supervisor whose stragglers were killed that way showed
// /proc/1/status with the job's uid (TestSetupStragglersDoNotReachMain
// counted no root process, under load, about one run in four).
func TestKillAsLeavesTheMainThreadRoot(t *testing.T) {
	requireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = []string{helperEnv + "=1", "SUP_MAIN_THREAD=1", "GOMAXPROCS=1", "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if want := "straggler: signal: killed\nmain thread Uid:\t0\t0\t0\t0\n"; err != nil || string(out) != want {
		t.Fatalf("helper: %q (%v), want %q", out, err, want)
	}
}

func mainThreadHelper() int {
	if unix.Gettid() != unix.Getpid() {
		fmt.Println("helper: not on the main thread")
		return 90
	}
	straggler := exec.Command("sleep", "60")
	straggler.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := straggler.Start(); err != nil {
		fmt.Println("helper: start:", err)
		return 90
	}
	runtime.UnlockOSThread()
	killAs(65534, -straggler.Process.Pid)
	werr := straggler.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		fmt.Println("helper: wait:", werr)
		return 90
	}
	fmt.Println("straggler:", ee)
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", os.Getpid())) // the thread group leader's
	if err != nil {
		fmt.Println("helper:", err)
		return 90
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "Uid:") {
			fmt.Println("main thread", sc.Text())
		}
	}
	return 0
}
