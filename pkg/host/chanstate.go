package host

import "github.com/roundtable-sandbox/sandbox/pkg/chanstate"

// The channel state file (pkg/chanstate), under the names the host's
// callers use.
type (
	// State is the channel state file.
	State = chanstate.State
	// Lock keeps a second host off the same directories.
	Lock = chanstate.Lock
)

// Channel modes.
const (
	ModeOn   = chanstate.ModeOn
	ModeOff  = chanstate.ModeOff
	ModeRich = chanstate.ModeRich
)

// ErrLocked: another sandbox-host owns these directories.
var ErrLocked = chanstate.ErrLocked

// LoadState reads (or starts) the state file at path (chanstate.LoadState).
func LoadState(path string, initialChannels []string) (*State, bool, error) {
	return chanstate.LoadState(path, initialChannels)
}

// AcquireLock takes the host's lock file (chanstate.AcquireLock).
func AcquireLock(path string) (*Lock, error) { return chanstate.AcquireLock(path) }
