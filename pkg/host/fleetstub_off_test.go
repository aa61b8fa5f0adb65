//go:build !fleetstub

package host

import "testing"

// TestStubTurnAbsentFromShippedBinaries: without the fleetstub tag no
// environment can select the stub turn.
func TestStubTurnAbsentFromShippedBinaries(t *testing.T) {
	t.Setenv("SANDBOX_FLEET_STUB_TURN", "200ms")
	if ex := stubExecutor(); ex != nil {
		t.Fatalf("stubExecutor() = %T in a build without the fleetstub tag", ex)
	}
}
