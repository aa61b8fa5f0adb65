// Package peerauth is who may call the host API: the caller's peer
// credentials (SO_PEERCRED of its Unix connection, its supplementary
// groups) and the role the operator's access rules give them.
// Guarantee: a peer whose credentials are unknown has no role; the host's
// own uid is an admin; every other uid has exactly the role its uid or one
// of its groups was given, and none otherwise.
package peerauth

import (
	"context"
	"net"
	"os/user"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// Role is what a peer may do on the API.
type Role int

// Roles, each including the ones before it.
const (
	RoleNone   Role = iota
	RoleClient      // run turns, read status
	RoleAdmin       // switch modes, fresh start, cancel
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// Peer is the kernel-reported identity of the process on the other end of a
// connection (SO_PEERCRED), plus the supplementary groups of its uid.
type Peer struct {
	Known    bool
	UID, GID int
	PID      int
	Groups   []int
}

// Authorize is the whole access decision, a pure function of the rules, the
// host's own uid and the peer. The host's uid is always an admin: the
// reaper runs as the same user. A guest uid or gid is never anything, even
// if a rule named it (config refuses that; this is the second line).
func Authorize(a config.ResolvedAccess, hostUID int, p Peer) Role {
	if !p.Known {
		return RoleNone
	}
	inGroups := func(gids []int) bool {
		if slices.Contains(gids, p.GID) {
			return true
		}
		for _, g := range p.Groups {
			if slices.Contains(gids, g) {
				return true
			}
		}
		return false
	}
	switch {
	case a.Guests.IsGuest(p.UID), a.Guests.IsGuest(p.GID):
		return RoleNone
	case p.UID == hostUID, slices.Contains(a.AdminUIDs, p.UID), inGroups(a.AdminGIDs):
		return RoleAdmin
	case slices.Contains(a.ClientUIDs, p.UID), inGroups(a.ClientGIDs):
		return RoleClient
	}
	return RoleNone
}

// Key is the context key of a request's Peer.
type Key struct{}

// From is the request's peer (the zero Peer, unknown, when none is set).
func From(ctx context.Context) Peer {
	p, _ := ctx.Value(Key{}).(Peer)
	return p
}

// PeerOf reads SO_PEERCRED of a Unix connection.
func PeerOf(c net.Conn) Peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil || cred == nil {
		return Peer{}
	}
	return Peer{Known: true, UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}
}

// SupplementaryGroups resolves the groups of uid through the system's user
// database; an unknown uid has none beyond its peer gid.
func SupplementaryGroups(uid int) []int {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return nil
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(ids))
	for _, s := range ids {
		if g, err := strconv.Atoi(s); err == nil {
			out = append(out, g)
		}
	}
	return out
}
