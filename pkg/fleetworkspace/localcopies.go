package fleetworkspace

import "sync"

// LocalCopies records which committed snapshot each channel's workspace on
// this box is, so an executor restores only when another box committed
// since (Input.Snapshot is not its copy). In memory only: after a restart
// every channel's first turn restores, which is always right.
type LocalCopies struct {
	mu sync.Mutex
	m  map[string]string
}

// Is reports whether the channel's local workspace is the snapshot.
func (c *LocalCopies) Is(channel, snapshot string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	name, ok := c.m[channel]
	return ok && name == snapshot
}

// Forget: the channel's local workspace is about to change (a turn runs,
// a restore starts) and is no snapshot until Set says so.
func (c *LocalCopies) Forget(channel string) {
	c.mu.Lock()
	delete(c.m, channel)
	c.mu.Unlock()
}

// Set records the channel's local workspace as the snapshot: after a
// restore of it, or after a turn whose snapshot is committed under it if
// the commit lands (Input.NextSnapshot; names are unique per commit, so a
// commit that does not land leaves the next turn's Snapshot another name).
func (c *LocalCopies) Set(channel, snapshot string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]string{}
	}
	c.m[channel] = snapshot
	c.mu.Unlock()
}
