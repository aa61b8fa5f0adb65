// Package chanstate is the host's channel state file
// (<stateDir>/state.json): each channel's mode (on, off, rich) and rich
// profile, and the guest uid of every channel and internal slot record,
// with the lock that keeps a second host off the same directories.
// Guarantee: a change is written through (temp, fsync, rename) before it
// is visible, so a crash leaves the old state or the new one whole; a
// corrupt or oversized file refuses to load and is left as it is; guest
// uids are unique and within the configured range.
package chanstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// Channel modes.
const (
	ModeOn  = "on"
	ModeOff = "off"
	// ModeRich runs the channel's turns on its long-lived rich worker
	// with the channel's profile.
	ModeRich = "rich"
)

const (
	stateVersion  = 1
	maxStateBytes = 16 << 20
	maxChannels   = 100_000
)

type stateFile struct {
	Version  int                     `json:"version"`
	Channels map[string]channelState `json:"channels"`
	// Guests records each channel's guest uid (also its gid), so the id
	// stays stable across restarts and two channels never share one even
	// when their preferred ids collide (GuestUID).
	Guests map[string]int `json:"guests,omitempty"`
}

type channelState struct {
	Mode string `json:"mode"`
	// Profile is a rich channel's profile name (mode rich only).
	Profile string `json:"profile,omitempty"`
}

// State is the host's routing state: which channels are in sandbox mode.
// Every change is written through atomically before it is visible.
type State struct {
	path string
	mu   sync.Mutex
	data stateFile
	// byUID is the inverse of data.Guests.
	byUID map[int]string
}

// LoadState reads the state file. When none exists it seeds one from
// initialChannels (mode on) and writes it; an existing file is never reseeded.
// Leftover temp files of an interrupted write are ignored (the rename never
// happened, so the old file is whole) and removed.
func LoadState(path string, initialChannels []string) (*State, bool, error) {
	s := &State{path: path, data: stateFile{Version: stateVersion, Channels: map[string]channelState{}, Guests: map[string]int{}}, byUID: map[int]string{}}
	data, err := atomicfile.ReadFile(path, maxStateBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		for _, ch := range initialChannels {
			if err := ids.ValidChannel(ch); err != nil {
				return nil, false, fmt.Errorf("state: initial channel: %w", err)
			}
			s.data.Channels[ch] = channelState{Mode: ModeOn}
		}
		if err := s.writeLocked(); err != nil {
			return nil, false, err
		}
		removeTemps(path)
		return s, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("state %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &s.data); err != nil {
		return nil, false, fmt.Errorf("state %s: not valid state JSON (%v); fix or move it aside", path, err)
	}
	if s.data.Version != stateVersion {
		return nil, false, fmt.Errorf("state %s: version %d, want %d", path, s.data.Version, stateVersion)
	}
	if s.data.Channels == nil {
		s.data.Channels = map[string]channelState{}
	}
	for ch, cs := range s.data.Channels {
		validMode := (cs.Mode == ModeOn || cs.Mode == ModeOff) && cs.Profile == "" ||
			cs.Mode == ModeRich && config.ValidProfileName(cs.Profile)
		if ids.ValidChannel(ch) != nil || !validMode {
			return nil, false, fmt.Errorf("state %s: invalid channel entry; fix or move it aside", path)
		}
	}
	if s.data.Guests == nil {
		s.data.Guests = map[string]int{}
	}
	if len(s.data.Guests) > maxChannels {
		return nil, false, fmt.Errorf("state %s: more than %d guest entries; fix or move it aside", path, maxChannels)
	}
	for ch, uid := range s.data.Guests {
		if ids.ValidName(ch) != nil || uid < config.MinGuestUID || uid > config.MaxGuestUID {
			return nil, false, fmt.Errorf("state %s: invalid guest entry (uid %d); fix or move it aside", path, uid)
		}
		if _, dup := s.byUID[uid]; dup {
			return nil, false, fmt.Errorf("state %s: guest uid %d is recorded for two channels; fix or move it aside", path, uid)
		}
		s.byUID[uid] = ch
	}
	removeTemps(path)
	return s, false, nil
}

// removeTemps deletes temp files atomicfile leaves when a crash hits between
// write and rename.
func removeTemps(path string) {
	dir, name := filepath.Split(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "."+name+".tmp") && e.Type().IsRegular() {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func (s *State) writeLocked() error {
	data, err := json.MarshalIndent(s.data, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("state %s: %w", s.path, err)
	}
	return nil
}

// Mode is the channel's mode; channels never switched are off.
func (s *State) Mode(channel string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cs, ok := s.data.Channels[channel]; ok {
		return cs.Mode
	}
	return ModeOff
}

// Profile is a rich channel's profile ("" for any other mode).
func (s *State) Profile(channel string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.Channels[channel].Profile
}

// SetMode persists a mode (on or off); on a write failure nothing changes.
func (s *State) SetMode(channel, mode string) error {
	if mode != ModeOn && mode != ModeOff {
		return fmt.Errorf("mode must be on or off")
	}
	return s.set(channel, channelState{Mode: mode})
}

// SetRich persists mode rich with profile; on a write failure nothing
// changes.
func (s *State) SetRich(channel, profile string) error {
	if !config.ValidProfileName(profile) {
		return fmt.Errorf("profile name invalid")
	}
	return s.set(channel, channelState{Mode: ModeRich, Profile: profile})
}

func (s *State) set(channel string, cs channelState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.data.Channels[channel]
	if !had && len(s.data.Channels) >= maxChannels {
		return fmt.Errorf("state holds %d channels already", maxChannels)
	}
	s.data.Channels[channel] = cs
	if err := s.writeLocked(); err != nil {
		if had {
			s.data.Channels[channel] = old
		} else {
			delete(s.data.Channels, channel)
		}
		return err
	}
	return nil
}

// GuestUID is the channel's guest uid (and gid) in range g: the recorded
// one while it lies in g; otherwise adopt, when it lies in g and no other
// channel holds it (the owner of an existing workspace, so a lost state file
// does not orphan workspaces); otherwise the first free id from the
// channel's preferred one (from its hash), probing upwards with wrap-around.
// A new assignment is written through before it is returned.
func (s *State) GuestUID(channel string, g config.Guests, adopt int) (int, error) {
	if err := ids.ValidName(channel); err != nil { // a channel or a slot record
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.data.Guests[channel]
	if had && g.IsGuest(old) {
		return old, nil
	}
	free := func(uid int) bool { _, taken := s.byUID[uid]; return g.IsGuest(uid) && !taken }
	uid := 0
	if free(adopt) {
		uid = adopt
	} else {
		if !had && len(s.data.Guests) >= maxChannels {
			return 0, fmt.Errorf("state holds %d guest uids already", maxChannels)
		}
		pref := int(preferredOffset(channel) % uint64(g.UIDCount))
		for i := 0; i < g.UIDCount; i++ {
			if c := g.UIDBase + (pref+i)%g.UIDCount; free(c) {
				uid = c
				break
			}
		}
		if uid == 0 {
			return 0, fmt.Errorf("guests.uidCount: all %d guest uids from %d are taken; widen the range", g.UIDCount, g.UIDBase)
		}
	}
	s.data.Guests[channel] = uid
	if err := s.writeLocked(); err != nil {
		if had {
			s.data.Guests[channel] = old
		} else {
			delete(s.data.Guests, channel)
		}
		return 0, err
	}
	if had {
		delete(s.byUID, old)
	}
	s.byUID[uid] = channel
	return uid, nil
}

// preferredOffset is the first 64 bits of the channel's hash.
func preferredOffset(channel string) uint64 {
	v, _ := strconv.ParseUint(ids.ChannelHash(channel)[:16], 16, 64)
	return v
}

// Channels lists the channels the state knows, sorted.
func (s *State) Channels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.data.Channels))
	for ch := range s.data.Channels {
		out = append(out, ch)
	}
	sort.Strings(out)
	return out
}

// ErrLocked reports another host holding the lock file.
var ErrLocked = errors.New("another sandbox-host owns these directories")

// Lock is an exclusive flock on the lock file, held for the host's lifetime.
type Lock struct{ f *os.File }

// AcquireLock takes the lock without waiting.
func AcquireLock(path string) (*Lock, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s is held: stop the other sandbox-host first: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return &Lock{f: f}, nil
}

// Release drops the lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	return l.f.Close()
}
