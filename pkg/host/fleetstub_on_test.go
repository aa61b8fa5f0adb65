//go:build fleetstub

package host

import (
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

func TestStubTurnSelectedInFleetstubBinaries(t *testing.T) {
	t.Setenv(StubTurnEnv, "")
	if ex := stubExecutor(); ex != nil {
		t.Fatalf("stubExecutor() = %T without %s", ex, StubTurnEnv)
	}
	t.Setenv(StubTurnEnv, "200ms")
	if ex, ok := stubExecutor().(*fleet.StubExecutor); !ok || ex.Duration != fleet.StubTurn {
		t.Fatalf("stubExecutor() = %#v, want a 200 ms stub", stubExecutor())
	}
}
