package host

import (
	"context"
	"net"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
)

// Who may call the API (pkg/peerauth), under the names the host's callers
// use.
type (
	// Role is what a peer may do on the API.
	Role = peerauth.Role
	// Peer is a caller's credentials.
	Peer    = peerauth.Peer
	peerKey = peerauth.Key
)

// Roles, each including the ones before it.
const (
	RoleNone   = peerauth.RoleNone
	RoleClient = peerauth.RoleClient
	RoleAdmin  = peerauth.RoleAdmin
)

// Authorize is the role of peer p (peerauth.Authorize).
func Authorize(a config.ResolvedAccess, hostUID int, p Peer) Role {
	return peerauth.Authorize(a, hostUID, p)
}

// PeerOf reads SO_PEERCRED of a Unix connection.
func PeerOf(c net.Conn) Peer { return peerauth.PeerOf(c) }

// SupplementaryGroups are a uid's supplementary groups.
func SupplementaryGroups(uid int) []int { return peerauth.SupplementaryGroups(uid) }

func peerFrom(ctx context.Context) Peer { return peerauth.From(ctx) }
