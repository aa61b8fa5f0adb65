package supervisor

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
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
// to are then killed from a throwaway thread that took their uid (see
// killAs).
func (s *supervisor) killStragglers(pgid int) bool {
	target := -1
	if !s.pid1 {
		target = -pgid
	}
	deadline := time.Now().Add(killTimeout)
	for {
		_ = unix.Kill(target, unix.SIGKILL)
		if s.root {
			for _, uid := range s.otherUIDs(target) {
				killAs(uid, target)
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

// killAs sends SIGKILL to target from a thread whose uids are all uid, so
// that the kernel lets it signal that uid's processes without CAP_KILL. The
// uid change is the thread's alone (a raw setresuid, not Go's all-threads
// one) and the thread never runs anything else: its goroutine exits locked,
// which ends the thread. Never on the main thread, which the runtime parks
// instead of ending: it would keep the uid, and the process (its /proc
// entry, the signals it takes) would then be that uid's, the main
// command's among them. A goroutine that lands there leaves it parked
// unchanged, and the next one runs elsewhere.
func killAs(uid, target int) {
	for range 2 {
		onMain := make(chan bool, 1)
		go func() {
			runtime.LockOSThread()
			if unix.Gettid() == unix.Getpid() {
				onMain <- true
				return
			}
			defer func() { onMain <- false }()
			if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); errno != 0 {
				return
			}
			_ = unix.Kill(target, unix.SIGKILL)
		}()
		if !<-onMain {
			return
		}
	}
}
