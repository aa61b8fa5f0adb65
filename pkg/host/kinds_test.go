package host

import (
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// The host's kinds, for tests that reach into one.
func (h *Host) codeRuns() *coderun.Kind         { return Kind[*coderun.Kind](h) }
func (h *Host) sealedTurns() *sealedturn.Kind   { return Kind[*sealedturn.Kind](h) }
func (h *Host) richSessions() *richsession.Kind { return Kind[*richsession.Kind](h) }

// standbyPool is the sealed turns' standby pool (nil when standbys are off).
func (h *Host) standbyPool() *standby.Pool { return h.sealedTurns().Pool() }

// richTuning is o's rich session tuning, added when o has none.
func richTuning(o *Options) *richsession.Tuning {
	for _, v := range o.Tuning {
		if t, ok := v.(*richsession.Tuning); ok {
			return t
		}
	}
	t := &richsession.Tuning{}
	o.Tuning = append(o.Tuning, t)
	return t
}

// TestDoctorChecksLoopOverTheKinds: sandbox-host doctor hears each kind's
// own checks (kind.Doctor) without a host: here the code run's projects
// and the rich session's skills, the host naming neither.
func TestDoctorChecksLoopOverTheKinds(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	cfg := &config.Config{
		Runs: config.Runs{Enabled: true, Projects: []config.Project{{Name: "demo", Path: missing}}},
		Rich: config.Rich{Enabled: true, SkillsDir: missing},
	}
	got := map[string]string{}
	DoctorChecks(cfg, kind.DoctorEnv{Stat: os.Stat}, func(name, status, detail, remedy string) { got[name] = status })
	want := map[string]string{"project demo": kind.CheckFail, "skills " + missing: kind.CheckFail}
	if !maps.Equal(got, want) {
		t.Errorf("checks = %v, want %v", got, want)
	}
}
