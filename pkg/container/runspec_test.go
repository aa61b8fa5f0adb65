package container

import (
	"errors"
	"slices"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// TestRunConfigs: a code run's container keeps the turn's confinement and
// changes only what DESIGN.md section 12 changes.
func TestRunConfigs(t *testing.T) {
	old := processIDs
	processIDs = func() (int, int) { return 990, 990 }
	t.Cleanup(func() { processIDs = old })
	for _, setup := range []bool{false, true} {
		for _, broker := range []bool{false, true} {
			s := validSpec(t)
			if !broker {
				s.TurnDir = ""
			}
			s.Run = &RunOptions{Setup: setup, OutputMB: 32, Command: []string{"/usr/lib/roundtable-sandbox/sandbox-worker", "run-supervise"}}
			if err := s.Validate(); err != nil {
				t.Fatalf("setup=%v broker=%v: valid run spec refused: %v", setup, broker, err)
			}
			cfg, host := s.configs(LogDriver)
			wantUser, wantCaps, wantRO := "1000:1000", []string(nil), true
			if setup {
				wantUser, wantCaps, wantRO = "0:0", SetupCapabilities, false
			}
			if cfg.User != wantUser || !slices.Equal(host.CapAdd, wantCaps) || host.ReadonlyRootfs != wantRO {
				t.Errorf("setup=%v: user %q caps %v readonly %v, want %q %v %v", setup, cfg.User, host.CapAdd, host.ReadonlyRootfs, wantUser, wantCaps, wantRO)
			}
			for _, c := range []string{"SYS_ADMIN", "SYS_PTRACE", "NET_ADMIN", "NET_RAW", "MKNOD"} {
				if slices.Contains(host.CapAdd, c) {
					t.Errorf("setup=%v: %s granted", setup, c)
				}
			}
			if !slices.Equal(host.CapDrop, []string{"ALL"}) || !slices.Contains(host.SecurityOpt, "no-new-privileges") ||
				host.NetworkMode != "none" || host.Privileged || host.IpcMode != "none" {
				t.Errorf("setup=%v: confinement changed: drop %v opts %v net %q priv %v ipc %q", setup, host.CapDrop, host.SecurityOpt, host.NetworkMode, host.Privileged, host.IpcMode)
			}
			if len(cfg.Env) != 1 || cfg.Env[0] != "LANG=C.UTF-8" {
				t.Errorf("env %v: a run's container carries no broker address or key", cfg.Env)
			}
			if got := host.Tmpfs[OutputPath]; got != "size=32m,mode=0755,nosuid,nodev,uid=1000,gid=1000" {
				t.Errorf("/output tmpfs %q", got)
			}
			wantMounts := 1
			if broker {
				wantMounts = 2
			}
			if len(host.Mounts) != wantMounts || host.Mounts[0].Target != protocol.WorkspacePath || !host.Mounts[0].ReadOnly {
				t.Errorf("broker=%v: mounts %+v: want /workspace read-only (+ /run/broker)", broker, host.Mounts)
			}
			if broker && (host.Mounts[1].Target != protocol.BrokerDir || !host.Mounts[1].ReadOnly) {
				t.Errorf("broker mount %+v", host.Mounts[1])
			}
			if !slices.Equal(append(cfg.Entrypoint, cfg.Cmd...), s.Run.Command) {
				t.Errorf("argv %v %v", cfg.Entrypoint, cfg.Cmd)
			}
		}
	}
	s := validSpec(t)
	s.TurnDir = ""
	if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("a turn without a turn dir: %v", err)
	}
	s.Run = &RunOptions{OutputMB: 0, Command: []string{"/x"}}
	if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("output 0 MiB: %v", err)
	}
	s.Run = &RunOptions{OutputMB: 8, Command: []string{"x"}}
	if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("relative command: %v", err)
	}
}

// TestPrecheckConfigs: a precheck's container is a turn's with the
// workspace read-only and the precheck argument; nothing else changes.
func TestPrecheckConfigs(t *testing.T) {
	old := processIDs
	processIDs = func() (int, int) { return 990, 990 }
	t.Cleanup(func() { processIDs = old })
	s := validSpec(t)
	turnCfg, turnHost := s.configs(LogDriver)
	s.Precheck = true
	if err := s.Validate(); err != nil {
		t.Fatalf("valid precheck spec refused: %v", err)
	}
	cfg, host := s.configs(LogDriver)
	if !slices.Equal(cfg.Cmd, []string{PrecheckCommand}) || len(cfg.Entrypoint) != 0 {
		t.Errorf("entrypoint %v cmd %v, want the image's entrypoint with [precheck]", cfg.Entrypoint, cfg.Cmd)
	}
	if len(host.Mounts) != 2 || host.Mounts[0].Target != protocol.WorkspacePath || !host.Mounts[0].ReadOnly ||
		host.Mounts[1].Target != protocol.BrokerDir || !host.Mounts[1].ReadOnly {
		t.Errorf("mounts %+v: want /workspace and /run/broker read-only", host.Mounts)
	}
	if cfg.User != turnCfg.User || !slices.Equal(cfg.Env, turnCfg.Env) || host.NetworkMode != turnHost.NetworkMode ||
		host.ReadonlyRootfs != true || !slices.Equal(host.CapDrop, turnHost.CapDrop) || !slices.Equal(host.SecurityOpt, turnHost.SecurityOpt) ||
		host.Memory != turnHost.Memory || host.MemorySwap != turnHost.MemorySwap || *host.PidsLimit != *turnHost.PidsLimit ||
		host.Tmpfs[TmpPath] != turnHost.Tmpfs[TmpPath] || host.IpcMode != turnHost.IpcMode {
		t.Errorf("confinement differs from a turn's: %+v / %+v", cfg, host)
	}
	s.Run = &RunOptions{OutputMB: 1, Command: []string{"/x"}}
	if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("run and precheck together: %v", err)
	}
}

// TestRichConfigs: a rich channel's container is a turn's with the rich
// argument: the same confinement, /workspace read-write, /run/broker
// read-only.
func TestRichConfigs(t *testing.T) {
	old := processIDs
	processIDs = func() (int, int) { return 990, 990 }
	t.Cleanup(func() { processIDs = old })
	s := validSpec(t)
	turnCfg, turnHost := s.configs(LogDriver)
	s.Rich = true
	if err := s.Validate(); err != nil {
		t.Fatalf("valid rich spec refused: %v", err)
	}
	cfg, host := s.configs(LogDriver)
	if !slices.Equal(cfg.Cmd, []string{RichCommand}) || len(cfg.Entrypoint) != 0 {
		t.Errorf("entrypoint %v cmd %v, want the image's entrypoint with [rich]", cfg.Entrypoint, cfg.Cmd)
	}
	if len(host.Mounts) != 2 || host.Mounts[0].Target != protocol.WorkspacePath || host.Mounts[0].ReadOnly ||
		host.Mounts[1].Target != protocol.BrokerDir || !host.Mounts[1].ReadOnly {
		t.Errorf("mounts %+v: want /workspace read-write and /run/broker read-only", host.Mounts)
	}
	if cfg.User != turnCfg.User || !slices.Equal(cfg.Env, turnCfg.Env) || host.NetworkMode != turnHost.NetworkMode ||
		!host.ReadonlyRootfs || !slices.Equal(host.CapDrop, turnHost.CapDrop) || !slices.Equal(host.SecurityOpt, turnHost.SecurityOpt) ||
		host.Memory != turnHost.Memory || host.MemorySwap != turnHost.MemorySwap || *host.PidsLimit != *turnHost.PidsLimit ||
		host.IpcMode != turnHost.IpcMode {
		t.Errorf("confinement differs from a turn's: %+v / %+v", cfg, host)
	}
	s.Precheck = true
	if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("rich and precheck together: %v", err)
	}
}
