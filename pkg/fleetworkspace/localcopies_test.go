package fleetworkspace

import "testing"

// TestLocalCopies: a channel's copy is a snapshot only from Set until
// Forget; channels are apart; the zero value is ready.
func TestLocalCopies(t *testing.T) {
	var c LocalCopies
	if c.Is("a", "") || c.Is("a", "c.x.1.1") {
		t.Fatal("an unknown channel's copy is no snapshot, not even the empty one")
	}
	c.Set("a", "c.x.1.1")
	c.Set("b", "c.y.4.9")
	if !c.Is("a", "c.x.1.1") || c.Is("a", "c.x.2.2") || !c.Is("b", "c.y.4.9") {
		t.Errorf("after Set: a %v, b %v", c.Is("a", "c.x.1.1"), c.Is("b", "c.y.4.9"))
	}
	c.Forget("a")
	if c.Is("a", "c.x.1.1") || !c.Is("b", "c.y.4.9") {
		t.Error("Forget reached the wrong channel")
	}
}
