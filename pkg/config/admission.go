package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Admission bounds (queue.*). The default wait equals the default turn
// deadline: measured in the e2e namespace on 2 cores at load average 39, 64
// first turns at once at the derived cap of 16 took 71.7 s for the last
// one, and 60 s refused it (429); at 120 s the burst has room to spare and
// a client still waits at most wait plus deadline.
const (
	MaxGlobalConcurrency    = 1024
	MinQueueWaitSeconds     = 1
	MaxQueueWaitSeconds     = 600
	DefaultQueueWaitSeconds = 120
)

// The derived global concurrency (queue.globalConcurrency: 0). Measured on
// 2 cores (issue 25): 64 first turns at once with no cap failed 41-54 of
// 64 (broker units timed out starting); caps of 2, 4 and 16 passed 64/64,
// 16 fastest (20.1 s wall against 26.2 s at 2). A turn mostly waits on its
// model, so the CPU bound is generous; memory is counted at the ceilings
// (the container's limits.memoryMb, its tmpfs charged inside it, plus the
// broker unit's MemoryMax), so the slots' ceilings never exceed MemoryShare
// of the machine, which is what makes a burst queue instead of swapping or
// meeting the OOM killer.
const (
	SlotsPerCPU     = 8
	BrokerMemoryMB  = 256 // sandbox-broker@.service MemoryMax
	MemoryShareNum  = 3   // of MemoryShareDen: the rest is the host's,
	MemoryShareDen  = 4   // Docker's, the OS's and the page cache
	fallbackMemMB   = 1024
	maxPlausibleMem = 1 << 40 // cgroup "max" and absurd values mean no limit
)

// The derived start concurrency (queue.startConcurrency: 0). A start (a
// cold turn's broker units through D-Bus and systemd, its container's
// create and start, its worker's start; a standby's preparation) is
// CPU-bound, unlike the rest of a turn, which mostly waits on its model:
// measured on 2 cores (issue 25), 64 first turns at once finished sooner
// with 4 running at once (26.2 s) than with 16 (36.2 s), so of the turns
// the global cap admits only StartsPerCPU per CPU start at once.
const StartsPerCPU = 2

// Machine is what the derived concurrency is derived from.
type Machine struct {
	CPUs     int
	MemoryMB int64
	// MemoryRead is false when MemoryMB is the 1 GiB stand-in.
	MemoryRead bool
}

// ReadMachine reads this machine: usable CPUs (runtime.NumCPU honours the
// affinity mask) and memory, the smaller of the total RAM and the
// memory.max of the cgroup the host sees (a box that is itself a
// container). RAM comes from sysinfo(2): the host's unit sets
// ProcSubset=pid, which hides /proc/meminfo (read only as a fallback).
// Memory it cannot read counts as 1 GiB, which errs on queueing, and Why
// says so.
func ReadMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), MemoryMB: fallbackMemMB}
	if mb, ok := sysinfoMemMB(); ok {
		m.MemoryMB, m.MemoryRead = mb, true
	} else if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, ok := memTotalKB(data); ok {
			m.MemoryMB, m.MemoryRead = kb/1024, true
		}
	}
	if data, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if b, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && b > 0 && b < maxPlausibleMem {
			m.MemoryMB, m.MemoryRead = min(m.MemoryMB, b>>20), true
		}
	}
	return m
}

func sysinfoMemMB() (int64, bool) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 0, false
	}
	unit := uint64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	return int64(uint64(si.Totalram) * unit >> 20), true
}

func memTotalKB(meminfo []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb, err == nil && kb > 0
		}
	}
	return 0, false
}

// Concurrency is the global concurrency in force and where it came from.
type Concurrency struct {
	Cap int `json:"cap"`
	// Derived is true when queue.globalConcurrency is 0.
	Derived bool `json:"derived"`
	// Why says how Cap was reached, for doctor and channel status.
	Why string `json:"why"`
}

// GlobalConcurrency is the cap on what runs at once across channels (turns,
// runs, prechecks and jobs share it): queue.globalConcurrency as written,
// or when that is 0 the smaller of SlotsPerCPU per CPU and the slots whose
// memory ceilings fit in MemoryShare of the machine, at least 1. There is
// no "no cap": measured, no cap thrashes; 1024 is the highest cap.
func (c *Config) GlobalConcurrency(m Machine) Concurrency {
	if n := c.Queue.GlobalConcurrency; n > 0 {
		return Concurrency{Cap: n, Why: "queue.globalConcurrency"}
	}
	cpus := max(m.CPUs, 1)
	byCPU := SlotsPerCPU * cpus
	slotMB := int64(max(c.Limits.MemoryMB, 0)) + BrokerMemoryMB
	byMem := int(max(m.MemoryMB, 0) * MemoryShareNum / MemoryShareDen / slotMB)
	n := max(min(byCPU, byMem, MaxGlobalConcurrency), 1)
	mem := fmt.Sprintf("%d MiB", m.MemoryMB)
	if !m.MemoryRead {
		mem += " (memory unreadable: a stand-in)"
	}
	why := fmt.Sprintf("derived (queue.globalConcurrency 0): min(%d per CPU x %d CPUs = %d, %d/%d of %s / (%d MiB limits.memoryMb + %d MiB broker) = %d)",
		SlotsPerCPU, cpus, byCPU, MemoryShareNum, MemoryShareDen, mem, c.Limits.MemoryMB, BrokerMemoryMB, byMem)
	return Concurrency{Cap: n, Derived: true, Why: why}
}

// StartConcurrency bounds how many of the turns running start at once:
// queue.startConcurrency as written, or when that is 0 StartsPerCPU per
// CPU; never above the global concurrency (more could not start anyway),
// at least 1.
func (c *Config) StartConcurrency(m Machine) Concurrency {
	global := c.GlobalConcurrency(m).Cap
	if n := c.Queue.StartConcurrency; n > 0 {
		if n > global {
			return Concurrency{Cap: global, Why: fmt.Sprintf("queue.startConcurrency %d, at most the global concurrency %d", n, global)}
		}
		return Concurrency{Cap: n, Why: "queue.startConcurrency"}
	}
	cpus := max(m.CPUs, 1)
	n := max(min(StartsPerCPU*cpus, global), 1)
	return Concurrency{Cap: n, Derived: true, Why: fmt.Sprintf("derived (queue.startConcurrency 0): min(%d per CPU x %d CPUs = %d, global concurrency %d)",
		StartsPerCPU, cpus, StartsPerCPU*cpus, global)}
}

// QueueWait is queue.maxWaitSeconds as a duration.
func (c *Config) QueueWait() time.Duration {
	return time.Duration(c.Queue.MaxWaitSeconds) * time.Second
}
