package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFindCgroupAndValues: a container's directory is found by its id
// under a controller's root (cgroup v1 as on this machine: a mount per
// controller, the bench's docker under roundtable-e2e-docker), not under
// another controller, and its counters read as numbers.
func TestFindCgroupAndValues(t *testing.T) {
	root := t.TempDir()
	const id = "24652e0c1b56eb4ace7c50d8d33dea1d0e40a4799a2da39aac415a0419dc584a"
	cpu := filepath.Join(root, "cpuacct", "roundtable-e2e-docker", id)
	if err := os.MkdirAll(cpu, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "blkio", "roundtable-e2e-docker", id), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cpu, "cpuacct.usage"), []byte("1234567\n"), 0o644)
	os.WriteFile(filepath.Join(cpu, "cpu.stat"), []byte("usage_usec 42\nuser_usec 40\n"), 0o644)
	for _, tc := range []struct {
		root, want string
	}{
		{filepath.Join(root, "cpuacct"), cpu},
		{filepath.Join(root, "memory"), ""},
		{filepath.Join(root, "cpuacct", "roundtable-e2e-docker"), cpu},
	} {
		if got := findCgroup(tc.root, id); got != tc.want {
			t.Errorf("findCgroup(%s) = %q, want %q", tc.root, got, tc.want)
		}
	}
	if got, err := cgroupValue(filepath.Join(cpu, "cpuacct.usage"), ""); err != nil || got != 1234567 {
		t.Errorf("cpuacct.usage = %d, %v; want 1234567", got, err)
	}
	if got, err := cgroupValue(filepath.Join(cpu, "cpu.stat"), "usage_usec"); err != nil || got != 42 {
		t.Errorf("usage_usec = %d, %v; want 42", got, err)
	}
	if _, err := cgroupValue(filepath.Join(cpu, "cpu.stat"), "nope"); err == nil {
		t.Error("a missing key read as a value")
	}
}
