package container

import (
	"errors"
	"slices"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// TestSessionConfigs: a session's container keeps the turn's confinement
// with a read-only root, starts its supervisor as root with exactly the
// setup capabilities (no CAP_KILL), mounts the project read-only and the
// guest's /work tmpfs, and has no turn directory (a network session's:
// sessionnet_test.go).
func TestSessionConfigs(t *testing.T) {
	old := processIDs
	processIDs = func() (int, int) { return 990, 990 }
	t.Cleanup(func() { processIDs = old })
	s := validSpec(t)
	s.TurnDir = ""
	s.Session = &SessionOptions{WorkMB: 64, OutputMB: 32, Command: []string{"/usr/lib/roundtable-sandbox/sandbox-worker", "session", "1000", "1000", WorkPath}}
	if err := s.Validate(); err != nil {
		t.Fatalf("valid session spec refused: %v", err)
	}
	cfg, host := s.configs(LogDriver)
	if cfg.User != "0:0" || !slices.Equal(host.CapAdd, SetupCapabilities) || slices.Contains(host.CapAdd, "KILL") || !host.ReadonlyRootfs {
		t.Errorf("user %q caps %v readonly %v", cfg.User, host.CapAdd, host.ReadonlyRootfs)
	}
	if !slices.Equal(host.CapDrop, []string{"ALL"}) || !slices.Contains(host.SecurityOpt, "no-new-privileges") ||
		host.NetworkMode != "none" || host.Privileged || host.IpcMode != "none" {
		t.Errorf("confinement changed: drop %v opts %v net %q priv %v ipc %q", host.CapDrop, host.SecurityOpt, host.NetworkMode, host.Privileged, host.IpcMode)
	}
	if got := host.Tmpfs[WorkPath]; got != "size=64m,mode=0700,nosuid,nodev,uid=1000,gid=1000" {
		t.Errorf("/work tmpfs %q", got)
	}
	if len(host.Mounts) != 1 || host.Mounts[0].Target != protocol.WorkspacePath || !host.Mounts[0].ReadOnly {
		t.Errorf("mounts %+v: want only the project, read-only", host.Mounts)
	}
	if cfg.WorkingDir != WorkPath || !slices.Equal(cfg.Entrypoint, s.Session.Command[:1]) || !slices.Equal(cfg.Cmd, s.Session.Command[1:]) {
		t.Errorf("workdir %q entrypoint %v cmd %v", cfg.WorkingDir, cfg.Entrypoint, cfg.Cmd)
	}
	if !cfg.OpenStdin || !cfg.StdinOnce {
		t.Errorf("stdin open %v once %v: the supervisor's requests come on it and end with the host's attach", cfg.OpenStdin, cfg.StdinOnce)
	}
	for name, change := range map[string]func(*Spec){
		"a missing turn dir": func(s *Spec) { s.TurnDir = s.WorkspaceDir + "x" },
		"also a run":         func(s *Spec) { s.Run = &RunOptions{OutputMB: 1, Command: []string{"/x"}} },
		"no work tmpfs":      func(s *Spec) { s.Session.WorkMB = 0 },
		"relative cmd":       func(s *Spec) { s.Session.Command = []string{"worker"} },
	} {
		bad := validSpec(t)
		bad.TurnDir = ""
		bad.Session = &SessionOptions{WorkMB: 64, OutputMB: 32, Command: []string{"/w", "session"}}
		change(&bad)
		if err := bad.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}
