package host

import (
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// DoctorChecks runs the doctor checks of every kind that has some
// (kind.Doctor), in the registry's order, asking each kind's Zero value:
// sandbox-host doctor runs without a host.
func DoctorChecks(cfg *config.Config, env kind.DoctorEnv, add kind.AddCheck) {
	for _, reg := range registry {
		if d, ok := reg.Zero.(kind.Doctor); ok {
			d.DoctorChecks(cfg, env, add)
		}
	}
}
