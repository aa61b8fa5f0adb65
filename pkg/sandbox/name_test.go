package sandbox

import (
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

func TestNameChannel(t *testing.T) {
	id := ids.NewTurnID()
	tests := []struct {
		name    string
		runRoot string
		wantErr string
	}{
		{"fits", "/run/rs", ""},
		{"socket over the bound", "/run/" + strings.Repeat("r", layout.MaxSocketPath), "broker socket path is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Handle{ID: id, Channel: "chan"}
			sock, err := b.NameChannel(tt.runRoot, "/var/lib/ws", "/run/pol")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantName, _ := ids.ContainerName("chan", id)
			wantWS, _ := layout.WorkspaceDir("/var/lib/ws", "chan")
			wantDir, _ := layout.TurnDir(tt.runRoot, id)
			wantPol, _ := layout.PolicyFile("/run/pol", id)
			wantSock, _ := layout.BrokerSocket(tt.runRoot, id)
			for _, c := range []struct{ what, got, want string }{
				{"container", b.Container, wantName}, {"workspace", b.Workspace, wantWS},
				{"dir", b.Dir, wantDir}, {"policy", b.Policy, wantPol}, {"socket", sock, wantSock},
			} {
				if c.got != c.want {
					t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
				}
			}
		})
	}
}
