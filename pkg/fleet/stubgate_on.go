//go:build fleetstub

package fleet

import (
	"os"
	"time"
)

// StubTurnEnv selects the stub turn in a fleetstub test binary: a duration
// ("200ms"), or "1" for StubTurn.
const StubTurnEnv = "SANDBOX_FLEET_STUB_TURN"

// StubFromEnv: the fleet harness's binary (go build -tags fleetstub) runs
// stub turns when StubTurnEnv is set.
func StubFromEnv() Executor {
	v := os.Getenv(StubTurnEnv)
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		d = StubTurn
	}
	return &StubExecutor{Duration: d}
}
