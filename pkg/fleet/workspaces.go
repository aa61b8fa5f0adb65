package fleet

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetworkspace"
)

// SweepWorkspaces sweeps the workspace store (pkg/fleetworkspace) of what
// no channel refers to, the channels' states deciding.
func (f *Fleet) SweepWorkspaces(ctx context.Context, age time.Duration) (fleetworkspace.Sweep, error) {
	return f.ws.Sweep(ctx, age, f.referenced)
}

// referenced: the snapshot is its channel's committed one, or that cannot
// be known (an unreadable state, a name not of workspaceName's form).
func (f *Fleet) referenced(ctx context.Context, name string) bool {
	key, ok := snapshotChannelKey(name)
	if !ok {
		return true
	}
	e, err := f.channels.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false
	}
	if err != nil {
		return true
	}
	st, err := decodeState(e.Value())
	return err != nil || st.Workspace == name
}

// snapshotChannelKey is the channel key a snapshot's name (workspaceName)
// starts with.
func snapshotChannelKey(name string) (string, bool) {
	parts := strings.Split(name, ".")
	if len(parts) != 4 || parts[0] != "c" {
		return "", false
	}
	return parts[0] + "." + parts[1], true
}
