package container

import (
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// TestSessionNetworkMount: a network session's container has its turn
// directory (the broker's socket) read-only at the broker path, and its
// network is still none; a turn directory that is the workspace is refused.
func TestSessionNetworkMount(t *testing.T) {
	s := validSpec(t)
	s.Session = &SessionOptions{WorkMB: 64, OutputMB: 32, Command: []string{"/w", "session"}}
	if err := s.Validate(); err != nil {
		t.Fatalf("network session spec refused: %v", err)
	}
	_, host := s.configs(LogDriver)
	if len(host.Mounts) != 2 {
		t.Fatalf("mounts %+v: want the project and the turn dir", host.Mounts)
	}
	m := host.Mounts[1]
	if m.Source != s.TurnDir || m.Target != protocol.BrokerDir || !m.ReadOnly {
		t.Errorf("turn dir mount %+v: want %s read-only at %s", m, s.TurnDir, protocol.BrokerDir)
	}
	if host.NetworkMode != "none" {
		t.Errorf("network %q: the broker is a network session's only way out", host.NetworkMode)
	}
	bad := validSpec(t)
	bad.Session = &SessionOptions{WorkMB: 64, OutputMB: 32, Command: []string{"/w", "session"}}
	bad.TurnDir = bad.WorkspaceDir
	if err := bad.Validate(); err == nil {
		t.Error("a turn dir that is the workspace was accepted")
	}
}
