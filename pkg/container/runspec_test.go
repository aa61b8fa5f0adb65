package container

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
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
			if setup {
				s.Run.GateDir = gateDir(t)
			}
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
			// Without setup the project is at /workspace; with setup behind
			// its gate (the gate first, so it is mounted first).
			type m struct{ source, target string }
			want := []m{{s.WorkspaceDir, protocol.WorkspacePath}}
			if setup {
				want = []m{{s.Run.GateDir, wire.SetupGatePath}, {s.WorkspaceDir, wire.SetupProjectPath}}
			}
			if broker {
				want = append(want, m{s.TurnDir, protocol.BrokerDir})
			}
			var got []m
			for _, mt := range host.Mounts {
				got = append(got, m{mt.Source, mt.Target})
				if !mt.ReadOnly || mt.Type != "bind" {
					t.Errorf("setup=%v broker=%v: mount %+v is not a read-only bind", setup, broker, mt)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("setup=%v broker=%v: mounts %v, want %v", setup, broker, got, want)
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
	// A run with setup has its gate, one without none; the gate holds
	// the project's mount point and is separate from the other mounts.
	noPoint, _ := filepath.EvalSymlinks(t.TempDir())
	for name, run := range map[string]RunOptions{
		"setup without a gate":   {Setup: true},
		"a gate without setup":   {GateDir: gateDir(t)},
		"gate without its point": {Setup: true, GateDir: noPoint},
		"gate is the workspace":  {Setup: true},
		"relative gate":          {Setup: true, GateDir: "gate"},
	} {
		s := validSpec(t)
		if name == "gate is the workspace" {
			run.GateDir = s.WorkspaceDir
			if err := os.Mkdir(filepath.Join(s.WorkspaceDir, "workspace"), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		run.OutputMB, run.Command = 8, []string{"/x"}
		s.Run = &run
		if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}

// gateDir is a run's gate as the host makes it: a directory holding the
// project's mount point.
func gateDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(d, "workspace"), 0o500); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSetupCapabilities: the container's set in a run with setup is the
// supervisor's; setup commands keep only chown, fowner and fsetid of it,
// nothing that reads past a file's mode or switches users (the project's
// gate relies on it), and nothing of the seed's dropped list is granted.
func TestSetupCapabilities(t *testing.T) {
	names := map[uintptr]string{unix.CAP_CHOWN: "CHOWN", unix.CAP_FOWNER: "FOWNER", unix.CAP_FSETID: "FSETID"}
	var cmd []string
	for _, c := range supervisor.SetupCommandCapabilities {
		n, ok := names[c]
		if !ok {
			t.Errorf("setup commands hold capability %d, want only chown, fowner, fsetid", c)
		}
		cmd = append(cmd, n)
		if !slices.Contains(SetupCapabilities, n) {
			t.Errorf("setup commands hold %s, which the container lacks", n)
		}
	}
	if !slices.Equal(cmd, []string{"CHOWN", "FOWNER", "FSETID"}) {
		t.Errorf("setup command capabilities %v", cmd)
	}
	for _, c := range []string{"DAC_READ_SEARCH", "SYS_ADMIN", "SYS_PTRACE", "NET_ADMIN", "NET_RAW", "MKNOD", "SYS_CHROOT", "SETFCAP", "AUDIT_WRITE", "NET_BIND_SERVICE", "KILL"} {
		if slices.Contains(SetupCapabilities, c) {
			t.Errorf("%s granted to a run with setup", c)
		}
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
