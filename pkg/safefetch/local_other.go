//go:build !linux

package safefetch

import (
	"errors"
	"log/slog"
	"net/netip"
	"runtime"
)

// AddrWatch keeps this box's addresses current on Linux (rtnetlink); here it
// cannot, so WatchLocalAddrs fails and the dialer refuses public addresses.
type AddrWatch struct{}

// WatchLocalAddrs is implemented on Linux only.
func WatchLocalAddrs(*slog.Logger) (*AddrWatch, error) {
	return nil, errors.New("watching this box's addresses needs rtnetlink (Linux), not " + runtime.GOOS)
}

// Contains always fails: the set is unknown.
func (*AddrWatch) Contains(netip.Addr) (bool, error) { return false, errLocalUnknown }

// Close does nothing.
func (*AddrWatch) Close() error { return nil }
