//go:build fleetstub

package fleet

import (
	"testing"
)

func TestStubTurnSelectedInFleetstubBinaries(t *testing.T) {
	t.Setenv(StubTurnEnv, "")
	if ex := StubFromEnv(); ex != nil {
		t.Fatalf("StubFromEnv() = %T without %s", ex, StubTurnEnv)
	}
	t.Setenv(StubTurnEnv, "200ms")
	if ex, ok := StubFromEnv().(*StubExecutor); !ok || ex.Duration != StubTurn {
		t.Fatalf("StubFromEnv() = %#v, want a 200 ms stub", StubFromEnv())
	}
}
