package safefetch

import (
	"errors"
	"log/slog"
	"net/netip"
	"sync"
)

// LocalAddrs is the set of every address of every interface of this box, as
// the classifier asks about it. AddrWatch (rtnetlink) is the real one; tests
// give a fake.
type LocalAddrs interface {
	// Contains reports whether a is an address of one of this box's
	// interfaces. A non-nil error means the set is not known now: the
	// caller must then treat every address as possibly the box's (fail
	// closed).
	Contains(a netip.Addr) (bool, error)
}

// ClassifyLocal is the dialer's classification: Classify, then this box's
// own addresses. A public address that is the box's own (or NAT64 of one) is
// ClassLocal: the static registries call it public, yet a connection to it
// reaches every service on the box that listens on all interfaces (Docker's
// published ports, exporters, "firewalled" backends), over lo, where no
// firewall looks. While the set is unknown, every public address is
// ClassLocalUnknown. A nil local is the process's SystemLocalAddrs.
func ClassifyLocal(a netip.Addr, local LocalAddrs) Class {
	c := Classify(a)
	if c != ClassPublic {
		return c
	}
	if local == nil {
		local = SystemLocalAddrs(nil)
	}
	check := []netip.Addr{a}
	if nat64WKP.Contains(a) {
		check = append(check, embeddedLow32(a))
	}
	for _, x := range check {
		own, err := local.Contains(x)
		switch {
		case err != nil:
			return ClassLocalUnknown
		case own:
			return ClassLocal
		}
	}
	return ClassPublic
}

// unknownAddrs is a set that could not be read: every question fails.
type unknownAddrs struct{ err error }

func (u unknownAddrs) Contains(netip.Addr) (bool, error) { return false, u.err }

var system struct {
	once  sync.Once
	local LocalAddrs
}

// SystemLocalAddrs is the process's one AddrWatch, started on first use: a
// Dialer without Local uses it. The first caller's log (slog.Default() when
// nil) gets its lines; call it at start with the service's logger so that
// a failure is logged then, once, blaming netlink. If the watch cannot
// start, the result answers every question with that error, so the dialer
// refuses every public address: fail closed.
func SystemLocalAddrs(log *slog.Logger) LocalAddrs {
	system.once.Do(func() {
		if log == nil {
			log = slog.Default()
		}
		w, err := WatchLocalAddrs(log)
		if err != nil {
			log.Error("cannot read this box's own addresses: every connection to a public address is refused",
				"system", "netlink", "reason", err.Error())
			system.local = unknownAddrs{err: errors.Join(errLocalUnknown, err)}
			return
		}
		system.local = w
	})
	return system.local
}

var errLocalUnknown = errors.New("this box's own addresses are unknown")
