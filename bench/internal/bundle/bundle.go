// Package bundle writes an OCI runtime bundle (config.json) for `runc run`
// with the same confinement a turn container gets from Docker (DESIGN.md
// section 4): new network namespace with no interfaces but loopback,
// read-only root, no capabilities, no_new_privs, a non-root uid:gid, memory
// with no extra swap, one CPU, a pids limit, a bounded /tmp tmpfs and the
// optional two rprivate bind mounts. It is the daemon-free floor the
// benchmarks compare a turn against. Docker's default seccomp profile is not
// reproduced (the floor is meant to be a floor).
package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Bind is one bind mount into the container.
type Bind struct {
	Source, Destination string
	ReadOnly            bool
}

// Spec is what varies between the benchmark's bundles.
type Spec struct {
	Args     []string
	Env      []string
	UID, GID uint32
	MemoryMB int64
	CPUs     float64
	Pids     int64
	TmpfsMB  int64
	Binds    []Bind
	// CgroupsPath places the container's cgroup; empty lets runc choose.
	CgroupsPath string
}

// ErrSpec reports an unusable spec.
var ErrSpec = errors.New("invalid bundle spec")

// Config returns the OCI config.json document for s.
func Config(s Spec) (map[string]any, error) {
	if len(s.Args) == 0 || s.Args[0] == "" || s.Args[0][0] != '/' {
		return nil, fmt.Errorf("args[0] must be an absolute path: %w", ErrSpec)
	}
	if s.UID == 0 || s.GID == 0 {
		return nil, fmt.Errorf("uid and gid must be non-root: %w", ErrSpec)
	}
	if s.MemoryMB <= 0 || s.CPUs <= 0 || s.Pids <= 0 || s.TmpfsMB <= 0 {
		return nil, fmt.Errorf("memory, cpus, pids and tmpfs must be positive: %w", ErrSpec)
	}
	mem := s.MemoryMB << 20
	period := int64(100000)
	mounts := []any{
		map[string]any{"destination": "/proc", "type": "proc", "source": "proc"},
		map[string]any{"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
			"options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		map[string]any{"destination": "/dev/pts", "type": "devpts", "source": "devpts",
			"options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		map[string]any{"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
			"options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		map[string]any{"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
			"options": []string{"nosuid", "noexec", "nodev"}},
		map[string]any{"destination": "/sys", "type": "sysfs", "source": "sysfs",
			"options": []string{"nosuid", "noexec", "nodev", "ro"}},
		map[string]any{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
			"options": []string{"nosuid", "nodev", "noexec", fmt.Sprintf("size=%dm", s.TmpfsMB)}},
	}
	for _, b := range s.Binds {
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Destination) {
			return nil, fmt.Errorf("bind paths must be absolute: %w", ErrSpec)
		}
		opts := []string{"rbind", "rprivate", "nosuid", "nodev"}
		if b.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		mounts = append(mounts, map[string]any{"destination": b.Destination, "type": "bind", "source": b.Source, "options": opts})
	}
	noCaps := []string{}
	linux := map[string]any{
		"namespaces": []any{
			map[string]string{"type": "pid"}, map[string]string{"type": "network"},
			map[string]string{"type": "ipc"}, map[string]string{"type": "uts"},
			map[string]string{"type": "mount"},
		},
		"resources": map[string]any{
			"devices": []any{map[string]any{"allow": false, "access": "rwm"}},
			"memory":  map[string]any{"limit": mem, "swap": mem},
			"cpu":     map[string]any{"quota": int64(s.CPUs * float64(period)), "period": period},
			"pids":    map[string]any{"limit": s.Pids},
		},
		"maskedPaths": []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
			"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
		"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
	}
	if s.CgroupsPath != "" {
		linux["cgroupsPath"] = s.CgroupsPath
	}
	return map[string]any{
		"ociVersion": "1.0.2-dev",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]any{"uid": s.UID, "gid": s.GID},
			"args":     s.Args,
			"env":      s.Env,
			"cwd":      "/",
			"capabilities": map[string]any{
				"bounding": noCaps, "effective": noCaps, "inheritable": noCaps, "permitted": noCaps, "ambient": noCaps,
			},
			"rlimits":         []any{map[string]any{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "sandbox",
		"mounts":   mounts,
		"linux":    linux,
	}, nil
}

// Write writes dir/config.json for s and makes the mount points the config
// needs inside dir/rootfs (which must already hold the payload).
func Write(dir string, s Spec) error {
	cfg, err := Config(s)
	if err != nil {
		return err
	}
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	for _, b := range s.Binds {
		if err := os.MkdirAll(filepath.Join(rootfs, b.Destination), 0o755); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
}
