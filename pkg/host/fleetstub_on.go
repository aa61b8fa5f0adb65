//go:build fleetstub

package host

import (
	"os"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// StubTurnEnv selects the stub turn in a fleetstub test binary: a duration
// ("200ms"), or "1" for fleet.StubTurn.
const StubTurnEnv = "SANDBOX_FLEET_STUB_TURN"

// stubExecutor: the fleet harness's binary (go build -tags fleetstub) runs
// stub turns when StubTurnEnv is set.
func stubExecutor() fleet.Executor {
	v := os.Getenv(StubTurnEnv)
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		d = fleet.StubTurn
	}
	return &fleet.StubExecutor{Duration: d}
}
