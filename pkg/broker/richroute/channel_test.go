package richroute

import (
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// TestRichStartupScope: before the first bind, metadata-only calls within
// 90 s and 32 calls; never a credential-bearing one; none after the first
// bind outside a bound turn.
func TestRichStartupScope(t *testing.T) {
	now := time.Now()
	b := &Routes{pol: &policy.Policy{}, now: func() time.Time { return now }, rich: newRichState(now, 0, 0)}
	if err := b.Allow(false); err == nil {
		t.Error("credential call admitted in the startup scope")
	}
	for i := 0; i < policy.StartupScopeCalls; i++ {
		if err := b.Allow(true); err != nil {
			t.Fatalf("metadata call %d refused: %v", i+1, err)
		}
	}
	if err := b.Allow(true); err == nil {
		t.Error("metadata call past the startup budget admitted")
	}
	b.rich = newRichState(now, 0, 0)
	now = now.Add(policy.StartupScopeDuration)
	if err := b.Allow(true); err == nil {
		t.Error("metadata call after 90 s admitted")
	}
	now = now.Add(-policy.StartupScopeDuration)
	b.rich.everBound = true
	if err := b.Allow(true); err == nil {
		t.Error("metadata call after the first bind, outside a turn, admitted")
	}
}
