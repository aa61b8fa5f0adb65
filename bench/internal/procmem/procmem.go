// Package procmem reads resident memory from /proc and samples it while a
// load runs, so the benchmark reports peaks, not a lucky moment.
package procmem

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Status returns the VmRSS and VmHWM (KiB) of pid from /proc/<pid>/status.
func Status(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseStatus(bufio.NewScanner(f))
}

func parseStatus(sc *bufio.Scanner) (rss, hwm int64, err error) {
	found := 0
	for sc.Scan() {
		line := sc.Text()
		for _, k := range []struct {
			prefix string
			dst    *int64
		}{{"VmRSS:", &rss}, {"VmHWM:", &hwm}} {
			if v, ok := strings.CutPrefix(line, k.prefix); ok {
				f := strings.Fields(v)
				if len(f) < 1 {
					return 0, 0, fmt.Errorf("procmem: bad %s line", k.prefix)
				}
				n, perr := strconv.ParseInt(f[0], 10, 64)
				if perr != nil {
					return 0, 0, fmt.Errorf("procmem: bad %s value", k.prefix)
				}
				*k.dst = n
				found++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if found < 2 {
		return 0, 0, fmt.Errorf("procmem: VmRSS/VmHWM missing (kernel thread or exited)")
	}
	return rss, hwm, nil
}

// PIDsByComm lists the pids whose /proc/<pid>/comm equals comm (the kernel
// truncates comm to 15 bytes; so is comm here).
func PIDsByComm(comm string) []int {
	if len(comm) > 15 {
		comm = comm[:15]
	}
	ents, _ := filepath.Glob("/proc/[0-9]*/comm")
	var out []int
	for _, e := range ents {
		data, err := os.ReadFile(e)
		if err != nil || strings.TrimSpace(string(data)) != comm {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Sampler records the peak VmRSS of processes named Comm (and of PID, when
// set) every Interval until Stop.
type Sampler struct {
	Comm     string
	PID      int
	Interval time.Duration

	mu       sync.Mutex
	peakComm int64
	peakPID  int64
	seen     map[int]bool
	stop     chan struct{}
	done     chan struct{}
}

// Start begins sampling.
func (s *Sampler) Start() {
	s.stop, s.done, s.seen = make(chan struct{}), make(chan struct{}), map[int]bool{}
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.Interval)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
}

func (s *Sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.PID > 0 {
		if rss, _, err := Status(s.PID); err == nil && rss > s.peakPID {
			s.peakPID = rss
		}
	}
	if s.Comm != "" {
		for _, pid := range PIDsByComm(s.Comm) {
			s.seen[pid] = true
			if rss, hwm, err := Status(pid); err == nil {
				if hwm > rss {
					rss = hwm
				}
				if rss > s.peakComm {
					s.peakComm = rss
				}
			}
		}
	}
}

// Stop ends sampling and returns the peak of PID, the peak of any process
// named Comm (its VmHWM when larger) and how many such processes were seen.
func (s *Sampler) Stop() (peakPID, peakComm int64, seen int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakPID, s.peakComm, len(s.seen)
}

// Rollup returns the Rss and Pss (KiB) of pid from /proc/<pid>/smaps_rollup:
// Pss splits pages shared between processes (a shim's or a worker's
// mapped binary) among them, so sums over many processes do not count a
// shared page many times.
func Rollup(pid int) (rss, pss int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseRollup(bufio.NewScanner(f))
}

func parseRollup(sc *bufio.Scanner) (rss, pss int64, err error) {
	found := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || (f[0] != "Rss:" && f[0] != "Pss:") {
			continue
		}
		n, perr := strconv.ParseInt(f[1], 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("procmem: bad %s value", f[0])
		}
		if f[0] == "Rss:" {
			rss = n
		} else {
			pss = n
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if found < 2 {
		return 0, 0, fmt.Errorf("procmem: Rss/Pss missing in smaps_rollup")
	}
	return rss, pss, nil
}

// Kind is the summed memory of every process with one comm.
type Kind struct {
	Comm   string `json:"comm"`
	Count  int    `json:"count"`
	RSSKiB int64  `json:"rssKiB"`
	PSSKiB int64  `json:"pssKiB"`
}

// SumByComm sums Rss and Pss over the processes named comm (processes
// that exit while read are left out).
func SumByComm(comm string) Kind {
	k := Kind{Comm: comm}
	for _, pid := range PIDsByComm(comm) {
		rss, pss, err := Rollup(pid)
		if err != nil {
			continue
		}
		k.Count++
		k.RSSKiB += rss
		k.PSSKiB += pss
	}
	return k
}
