package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// killTimeout bounds killing a command's leftovers.
const killTimeout = 5 * time.Second

// killStragglers kills what a command left running and reports whether
// nothing is left. As PID 1 of the container's PID namespace it kills every
// process but itself (kill(-1), repeated, reaping between, until kill(-1, 0)
// finds no process at all); otherwise the command's process group.
//
// A root supervisor may lack CAP_KILL (the setup set leaves it out), and
// without it root may signal only processes whose real or saved uid is 0:
// the main command's processes and any other uid a setup command switched
// to are then killed by a child process that took their uid (see killAs).
func (s *supervisor) killStragglers(pgid int) bool {
	target := -1
	if !s.pid1 {
		target = -pgid
	}
	deadline := time.Now().Add(killTimeout)
	logged := false
	for {
		_ = unix.Kill(target, unix.SIGKILL)
		if s.root {
			for _, uid := range s.otherUIDs(target) {
				if err := s.killAs(uid, target, deadline); err != nil && !logged {
					// Once: the loop retries every few milliseconds.
					s.log.Warn("a straggler killer failed; retrying until the kill's deadline", "uid", uid, "reason", err.Error())
					logged = true
				}
			}
		}
		s.rp.reap()
		// kill(pid, 0) fails with ESRCH only when no process is left
		// (with EPERM alone it reports success).
		if err := unix.Kill(target, 0); err == unix.ESRCH {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// otherUIDs lists the non-zero real uids of the processes target reaches
// (at most 64): the job's uid, plus those of /proc's processes when /proc
// can be read.
func (s *supervisor) otherUIDs(target int) []int {
	uids := []int{s.job.UID}
	seen := map[int]bool{s.job.UID: true}
	d, err := os.Open("/proc")
	if err != nil {
		return uids
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	self := os.Getpid()
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == self || len(uids) >= 64 {
			continue
		}
		if target < -1 {
			if pg, err := unix.Getpgid(pid); err != nil || pg != -target {
				continue
			}
		}
		if uid, ok := procRealUID(pid); ok && uid != 0 && !seen[uid] {
			seen[uid] = true
			uids = append(uids, uid)
		}
	}
	return uids
}

// procRealUID reads the real uid of pid from /proc/<pid>/status.
func procRealUID(pid int) (int, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				return 0, false
			}
			uid, err := strconv.Atoi(fields[0])
			return uid, err == nil
		}
	}
	return 0, false
}

// KillArg, after the binary's name, makes sandbox-worker a straggler
// killer (KillMain) instead of a supervisor: killAs runs this binary again
// as "/proc/self/exe KillArg <target>" under the uid to kill.
const KillArg = "run-supervise-kill"

// selfExe is this binary whatever happened to its path since it started (a
// setup command may move or chmod the file; the magic link still names
// what runs, and needs no search permission on its directories).
const selfExe = "/proc/self/exe"

// KillMain is the straggler killer: it sends SIGKILL to target (-1, or a
// process group as -pgid) with the uid it was started as. Its result is
// not the killer's to judge (ESRCH: nothing left; EPERM: only others'
// processes): the supervisor checks what is left.
func KillMain(target string) int {
	t, err := strconv.Atoi(target)
	if err != nil || t >= 0 {
		return 2
	}
	_ = unix.Kill(t, unix.SIGKILL)
	return 0
}

// killAs sends SIGKILL to target as uid, from a child process (KillMain)
// started with that uid and gid 0: the kernel lets a sender without
// CAP_KILL signal a process only when its real or effective uid is the
// target's real or saved uid. Gid 0 keeps the guest from ptracing it.
//
// No thread of the supervisor ever takes the uid. kill(2) accepts any
// thread's id and checks that thread's credentials, so a thread holding the
// guest's uid, even for a moment, lets the guest signal the whole
// supervisor (SIGQUIT ends it); and were it the main thread, Go would park
// it for good instead of ending it, leaving the process itself (its
// thread-group leader) with the guest's uid.
//
// The killer is waited for until deadline. The guest may kill or stop it
// (it has the guest's uid): the caller's loop then starts another and, at
// the deadline, fails closed.
func (s *supervisor) killAs(uid, target int, deadline time.Time) error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	fd := devnull.Fd()
	attr := &syscall.ProcAttr{
		Files: []uintptr{fd, fd, fd},
		// No supplementary groups: an empty, non-nil Groups makes the
		// child call setgroups(0, NULL).
		Sys: &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: 0, Groups: []uint32{}}},
	}
	argv := []string{"sandbox-worker", KillArg, strconv.Itoa(target)}
	_, done, err := s.rp.start(func() (int, error) { return syscall.ForkExec(selfExe, argv, attr) })
	if err != nil {
		return err
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case ws := <-done:
		if !ws.Exited() || ws.ExitStatus() != 0 {
			return fmt.Errorf("the killer ended with status %#x", uint32(ws))
		}
		return nil
	case <-t.C:
		return errors.New("the killer did not end in time")
	}
}
