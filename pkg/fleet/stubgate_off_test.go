//go:build !fleetstub

package fleet

import "testing"

// TestStubTurnAbsentFromShippedBinaries: without the fleetstub tag no
// environment can select the stub turn.
func TestStubTurnAbsentFromShippedBinaries(t *testing.T) {
	t.Setenv("SANDBOX_FLEET_STUB_TURN", "200ms")
	if ex := StubFromEnv(); ex != nil {
		t.Fatalf("StubFromEnv() = %T in a build without the fleetstub tag", ex)
	}
}
