package cli

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats"
)

// TestDoctorFleetOff: one line, "off", and nothing of the fleet is asked.
func TestDoctorFleetOff(t *testing.T) {
	path, d := fakeMachine(t)
	d.fleetHealth = func(context.Context, config.Fleet) []fleetnats.Finding {
		t.Error("fleet checked while fleet.enabled is false")
		return nil
	}
	rep := runDoctor(context.Background(), path, d)
	c, ok := statusOf(rep, "fleet")
	if !ok || c.Status != StatusOK || !strings.HasPrefix(c.Detail, "off") {
		t.Errorf("fleet line %+v (found %v)", c, ok)
	}
	if !rep.OK {
		t.Errorf("doctor failed: %+v", rep.Checks)
	}
}

// TestDoctorFleetOn: the local server's unit and every finding of the
// fleet checks are reported; a failing one fails doctor, naming what is
// broken.
func TestDoctorFleetOn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hostNet  string // the host unit's PrivateNetwork
		nats     unitState
		findings []fleetnats.Finding
		wantOK   bool
		line     string // the check that must carry want
		want     string
	}{
		{"healthy", "no", unitState{"loaded", "active", "running", "success"},
			[]fleetnats.Finding{{Name: "fleet", Status: StatusOK, Detail: "connected"}, {Name: "stream SANDBOX_TURNS", Status: StatusOK, Detail: "3 replicas"}},
			true, "stream SANDBOX_TURNS", "3 replicas"},
		{"host without network", "yes", unitState{"loaded", "active", "running", "success"},
			[]fleetnats.Finding{{Name: "fleet", Status: StatusOK}},
			false, "fleet-host-net", "PrivateNetwork=yes: the host cannot reach fleet.url"},
		{"server stopped", "no", unitState{"loaded", "failed", "failed", "exit-code"},
			[]fleetnats.Finding{{Name: "fleet", Status: StatusFail, Detail: "cannot connect to fleet.url tls://127.0.0.1:4222"}},
			false, "fleet-server", "sandbox-nats.service is failed (failed), result exit-code"},
		{"stream without leader", "no", unitState{"loaded", "active", "running", "success"},
			[]fleetnats.Finding{{Name: "fleet", Status: StatusOK}, {Name: "stream SANDBOX_TURNS", Status: StatusFail, Detail: "SANDBOX_TURNS has no leader"}},
			false, "stream SANDBOX_TURNS", "has no leader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, d := fakeMachine(t)
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("fleet:\n  enabled: true\n  box: box-a\n")
			f.Close()
			d.unitState = fakeUnitStates(map[string]unitState{NATSUnit: tc.nats})
			d.unitProperty = func(_ context.Context, unit, prop string) (string, error) {
				if unit != "sandbox-host.service" || prop != "PrivateNetwork" {
					t.Errorf("asked %s %s", unit, prop)
				}
				return tc.hostNet, nil
			}
			called := 0
			d.fleetHealth = func(_ context.Context, f config.Fleet) []fleetnats.Finding {
				called++
				if f.Box != "box-a" {
					t.Errorf("checked box %q", f.Box)
				}
				return tc.findings
			}
			rep := runDoctor(context.Background(), path, d)
			if called != 1 || rep.OK != tc.wantOK {
				t.Errorf("fleet checks called %d times; ok %v, want %v: %+v", called, rep.OK, tc.wantOK, rep.Checks)
			}
			if c, ok := statusOf(rep, tc.line); !ok || !strings.Contains(c.Detail, tc.want) {
				t.Errorf("%s: %+v, want %q", tc.line, c, tc.want)
			}
		})
	}
}
