package config

import (
	"strings"
	"testing"
)

func TestGlobalConcurrency(t *testing.T) {
	tests := []struct {
		name       string
		configured int
		memoryMB   int
		m          Machine
		want       int
		derived    bool
	}{
		// 8 per CPU; 3/4 of the memory over (limit + 256 MiB broker).
		{"2 cores, plenty of memory: the CPU bound", 0, 512, Machine{CPUs: 2, MemoryMB: 24105}, 16, true},
		{"2 cores, 4 GiB: the memory bound", 0, 512, Machine{CPUs: 2, MemoryMB: 4096}, 4, true},
		{"bigger containers take more memory each", 0, 2048, Machine{CPUs: 2, MemoryMB: 24105}, 7, true},
		{"too little memory for one slot still admits one", 0, 512, Machine{CPUs: 4, MemoryMB: 512}, 1, true},
		{"no CPU count read counts as one", 0, 512, Machine{CPUs: 0, MemoryMB: 24105}, 8, true},
		{"a huge machine stops at the highest cap", 0, 512, Machine{CPUs: 256, MemoryMB: 1 << 30}, MaxGlobalConcurrency, true},
		{"configured wins", 3, 512, Machine{CPUs: 64, MemoryMB: 1 << 20}, 3, false},
		{"configured above the derived value wins too", 100, 512, Machine{CPUs: 1, MemoryMB: 1024}, 100, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Queue: Queue{GlobalConcurrency: tc.configured}, Limits: Limits{MemoryMB: tc.memoryMB}}
			got := c.GlobalConcurrency(tc.m)
			if got.Cap != tc.want || got.Derived != tc.derived {
				t.Errorf("GlobalConcurrency(%+v) = %+v, want cap %d derived %v", tc.m, got, tc.want, tc.derived)
			}
			if tc.derived && (!strings.Contains(got.Why, "derived") || !strings.Contains(got.Why, "stand-in")) {
				t.Errorf("Why = %q, want it to say it is derived", got.Why)
			}
		})
	}
}

func TestStartConcurrency(t *testing.T) {
	plenty := Machine{CPUs: 2, MemoryMB: 24105, MemoryRead: true}
	tests := []struct {
		name           string
		global, starts int
		m              Machine
		want           int
		derived        bool
		why            string
	}{
		{"2 cores: 2 per CPU", 0, 0, plenty, 4, true, "2 per CPU x 2 CPUs = 4"},
		{"never above the global concurrency", 3, 0, plenty, 3, true, "global concurrency 3"},
		{"no CPU count read counts as one", 0, 0, Machine{CPUs: 0, MemoryMB: 24105}, 2, true, "x 1 CPUs"},
		{"a derived global cap of 1 starts one", 0, 0, Machine{CPUs: 4, MemoryMB: 512}, 1, true, "global concurrency 1"},
		{"configured wins", 0, 7, plenty, 7, false, "queue.startConcurrency"},
		{"configured above the global concurrency is cut to it", 4, 9, plenty, 4, false, "queue.startConcurrency 9, at most the global concurrency 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Queue: Queue{GlobalConcurrency: tc.global, StartConcurrency: tc.starts}, Limits: Limits{MemoryMB: 512}}
			got := c.StartConcurrency(tc.m)
			if got.Cap != tc.want || got.Derived != tc.derived || !strings.Contains(got.Why, tc.why) {
				t.Errorf("StartConcurrency(%+v) = %+v, want cap %d derived %v, why containing %q", tc.m, got, tc.want, tc.derived, tc.why)
			}
		})
	}
}

func TestMemTotal(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"MemTotal:       24683976 kB\nMemFree:        21512312 kB\n", 24683976, true},
		{"MemFree:        21512312 kB\nMemTotal: 1024 kB\n", 1024, true},
		{"MemFree: 1 kB\n", 0, false},
		{"MemTotal: x kB\n", 0, false},
	}
	for _, tc := range tests {
		got, ok := memTotalKB([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("memTotalKB(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadMachineReadsSomething(t *testing.T) {
	m := ReadMachine()
	if m.CPUs < 1 || m.MemoryMB < 1 || !m.MemoryRead {
		t.Errorf("ReadMachine() = %+v, want at least one CPU and memory read", m)
	}
	// sysinfo(2) is what the host reads: its unit's ProcSubset=pid hides
	// /proc/meminfo (the e2e burst ran at a stand-in 1 GiB, cap 1).
	if mb, ok := sysinfoMemMB(); !ok || mb < 1 {
		t.Errorf("sysinfoMemMB() = %d, %v; want the machine's RAM", mb, ok)
	}
}
