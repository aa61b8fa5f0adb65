package safefetch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// subRcvBuf is the subscription socket's receive buffer (the kernel caps it
// at net.core.rmem_max): room for bursts such as Docker creating many
// interfaces at once. An overflow costs a full dump, not correctness.
const subRcvBuf = 1 << 20

// maxDumpTries bounds the full dumps tried in a row, each retried when the
// kernel marks it interrupted by a concurrent change (NLM_F_DUMP_INTR).
const maxDumpTries = 5

// AddrWatch is the set of every address of every interface of this box,
// kept current from rtnetlink: a subscription to the IPv4 and IPv6 address
// groups (RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR), opened before a full
// dump so no change between the two is lost, and a new full dump whenever
// the kernel reports that it dropped events (ENOBUFS). While that dump runs,
// and for good after an error the watch cannot recover from, the set is
// unknown and Contains returns an error: the dialer then refuses (fail
// closed). Entries are per interface: an address that two interfaces carry
// stays until both dropped it.
type AddrWatch struct {
	log   *slog.Logger
	src   eventSource
	dump  func() ([]byte, error)
	state atomic.Pointer[addrState]
	// resyncs counts the full dumps after dropped events (tests).
	resyncs   atomic.Int64
	closing   atomic.Bool
	closeOnce sync.Once
	done      chan struct{}
}

// eventSource is the subscription: one datagram of netlink messages a call.
type eventSource interface {
	// recv reads one datagram; fromKernel is false for one another process
	// sent. unix.ENOBUFS means the kernel dropped events.
	recv(buf []byte) (n int, fromKernel bool, err error)
	// drain discards every queued datagram. After an ENOBUFS the kernel
	// stays "congested" and drops further events without a new ENOBUFS
	// until the queue has been emptied once: draining before the full
	// dump makes any later drop report again.
	drain() error
	close() error
}

type ifAddr struct {
	index uint32
	addr  netip.Addr
}

// addrState is one published view: the addresses, or why they are unknown.
// next is closed when newer replaces it (tests wait on it and walk the
// chain; newer is set before next is closed and read only after).
type addrState struct {
	set   map[netip.Addr]struct{}
	err   error
	next  chan struct{}
	newer *addrState
}

var (
	errEventsLost  = errors.New("netlink dropped address events; re-reading every address")
	errWatchClosed = errors.New("the address watch is closed")
)

// WatchLocalAddrs reads every address of this box and keeps the set current
// until Close. log gets a line when the set becomes unknown (blaming
// netlink) and when dropped events force a new dump.
func WatchLocalAddrs(log *slog.Logger) (*AddrWatch, error) {
	src, err := openSubscription(subRcvBuf)
	if err != nil {
		return nil, err
	}
	w, err := newAddrWatch(log, src, dumpAddrs)
	if err != nil {
		src.close()
		return nil, err
	}
	return w, nil
}

// newAddrWatch takes an open subscription, reads the full set and starts
// following src.
func newAddrWatch(log *slog.Logger, src eventSource, dump func() ([]byte, error)) (*AddrWatch, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &AddrWatch{log: log, src: src, dump: dump, done: make(chan struct{})}
	w.state.Store(&addrState{err: errLocalUnknown, next: make(chan struct{})})
	cur, err := w.fullDump()
	if err != nil {
		return nil, err
	}
	w.publish(cur, nil)
	go w.run(cur)
	return w, nil
}

// Contains reports whether a is an address of one of this box's interfaces,
// or an error while that is not known.
func (w *AddrWatch) Contains(a netip.Addr) (bool, error) {
	s := w.state.Load()
	if s.err != nil {
		return false, s.err
	}
	_, ok := s.set[a]
	return ok, nil
}

// Close stops the watch; Contains then fails (closed).
func (w *AddrWatch) Close() error {
	var err error
	w.closeOnce.Do(func() {
		w.closing.Store(true)
		err = w.src.close()
		<-w.done
	})
	return err
}

// current is the published state (tests wait on its next channel).
func (w *AddrWatch) current() *addrState { return w.state.Load() }

func (w *AddrWatch) publish(cur map[ifAddr]struct{}, err error) {
	s := &addrState{err: err, next: make(chan struct{})}
	if err == nil {
		s.set = make(map[netip.Addr]struct{}, len(cur))
		for k := range cur {
			s.set[k.addr] = struct{}{}
		}
	}
	old := w.state.Swap(s)
	old.newer = s
	close(old.next)
}

// fail makes the set unknown for good and says so, once, blaming netlink.
func (w *AddrWatch) fail(err error) {
	w.log.Error("lost track of this box's own addresses: every connection to a public address is refused from now on",
		"system", "netlink", "reason", err.Error())
	w.publish(nil, errors.Join(errLocalUnknown, err))
}

func (w *AddrWatch) run(cur map[ifAddr]struct{}) {
	defer close(w.done)
	buf := make([]byte, 1<<16)
	for {
		n, fromKernel, err := w.src.recv(buf)
		switch {
		case errors.Is(err, unix.ENOBUFS):
			w.resyncs.Add(1)
			w.log.Warn("netlink dropped address events; reading every address again", "system", "netlink")
			w.publish(nil, errors.Join(errLocalUnknown, errEventsLost))
			if derr := w.src.drain(); derr != nil {
				w.fail(fmt.Errorf("draining address events: %w", derr))
				return
			}
			m, derr := w.fullDump()
			if derr != nil {
				w.fail(derr)
				return
			}
			cur = m
			w.publish(cur, nil)
			continue
		case err != nil && w.closing.Load():
			w.publish(nil, errors.Join(errLocalUnknown, errWatchClosed))
			return
		case err != nil:
			w.fail(fmt.Errorf("reading address events: %w", err))
			return
		case !fromKernel:
			// Only the kernel speaks for the kernel: a forged deletion
			// would open the box's own address.
			continue
		}
		changed, err := applyAddrMessages(cur, buf[:n], false)
		if err != nil {
			w.fail(err)
			return
		}
		if changed {
			w.publish(cur, nil)
		}
	}
}

// fullDump reads every address (RTM_GETADDR dump), again when the kernel
// marks the dump interrupted by a change.
func (w *AddrWatch) fullDump() (map[ifAddr]struct{}, error) {
	for range maxDumpTries {
		b, err := w.dump()
		if err != nil {
			return nil, fmt.Errorf("reading every address (RTM_GETADDR dump): %w", err)
		}
		m := map[ifAddr]struct{}{}
		intr, err := applyDump(m, b)
		if err != nil {
			return nil, err
		}
		if !intr {
			return m, nil
		}
	}
	return nil, fmt.Errorf("reading every address: the dump was interrupted by changes %d times in a row", maxDumpTries)
}

func dumpAddrs() ([]byte, error) { return syscall.NetlinkRIB(syscall.RTM_GETADDR, syscall.AF_UNSPEC) }

// applyDump adds a dump's addresses to m and reports whether the kernel
// marked it inconsistent.
func applyDump(m map[ifAddr]struct{}, b []byte) (interrupted bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return false, fmt.Errorf("parsing the address dump: %w", err)
	}
	for _, msg := range msgs {
		if msg.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
			interrupted = true
		}
	}
	_, err = applyAddrMessages(m, b, true)
	return interrupted, err
}

// applyAddrMessages applies the RTM_NEWADDR and RTM_DELADDR messages in b to
// m (a dump holds only RTM_NEWADDR and the end marker) and reports whether m
// changed. Other message types are skipped.
func applyAddrMessages(m map[ifAddr]struct{}, b []byte, dump bool) (changed bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err == nil && len(msgs) == 0 {
		err = fmt.Errorf("%d bytes hold no message", len(b))
	}
	if err != nil {
		return false, fmt.Errorf("parsing address events: %w", err)
	}
	for i := range msgs {
		msg := &msgs[i]
		t := msg.Header.Type
		if t != unix.RTM_NEWADDR && t != unix.RTM_DELADDR || dump && t == unix.RTM_DELADDR {
			continue
		}
		k, ok, err := parseAddrMessage(msg)
		if err != nil {
			return changed, err
		}
		if !ok {
			continue
		}
		_, had := m[k]
		if t == unix.RTM_NEWADDR && !had {
			m[k] = struct{}{}
			changed = true
		} else if t == unix.RTM_DELADDR && had {
			delete(m, k)
			changed = true
		}
	}
	return changed, nil
}

// parseAddrMessage reads the interface and the local address of one
// RTM_NEWADDR or RTM_DELADDR: IFA_LOCAL when present (on a point-to-point
// link IFA_ADDRESS is the peer's), else IFA_ADDRESS. ok is false for a
// family other than IPv4 and IPv6.
func parseAddrMessage(msg *syscall.NetlinkMessage) (ifAddr, bool, error) {
	if len(msg.Data) < unix.SizeofIfAddrmsg {
		return ifAddr{}, false, errors.New("short address message")
	}
	family := msg.Data[0]
	index := binary.NativeEndian.Uint32(msg.Data[4:8])
	var want int
	switch family {
	case unix.AF_INET:
		want = 4
	case unix.AF_INET6:
		want = 16
	default:
		return ifAddr{}, false, nil
	}
	attrs, err := syscall.ParseNetlinkRouteAttr(msg)
	if err != nil {
		return ifAddr{}, false, fmt.Errorf("parsing an address message's attributes: %w", err)
	}
	var local, address []byte
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFA_LOCAL:
			local = a.Value
		case unix.IFA_ADDRESS:
			address = a.Value
		}
	}
	v := local
	if v == nil {
		v = address
	}
	if len(v) != want {
		return ifAddr{}, false, fmt.Errorf("address message of family %d carries %d address bytes", family, len(v))
	}
	a, _ := netip.AddrFromSlice(v)
	return ifAddr{index: index, addr: a}, true, nil
}

// subscription is a NETLINK_ROUTE socket bound to the address groups, read
// through the runtime's poller (so close ends a read in progress).
type subscription struct {
	f  *os.File
	rc syscall.RawConn
}

func openSubscription(rcvbuf int) (*subscription, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket (a unit needs AF_NETLINK in RestrictAddressFamilies=): %w", err)
	}
	if rcvbuf > 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("subscribing to address events: %w", err)
	}
	f := os.NewFile(uintptr(fd), "netlink-addr")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &subscription{f: f, rc: rc}, nil
}

func (s *subscription) recv(buf []byte) (int, bool, error) {
	var (
		n    int
		from unix.Sockaddr
		rerr error
	)
	err := s.rc.Read(func(fd uintptr) bool {
		n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, false, err
	}
	if rerr != nil {
		return 0, false, rerr
	}
	nl, ok := from.(*unix.SockaddrNetlink)
	return n, ok && nl.Pid == 0, nil
}

func (s *subscription) drain() error {
	buf := make([]byte, 1<<16)
	var derr error
	err := s.rc.Control(func(fd uintptr) {
		for {
			_, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			switch err {
			case nil, unix.ENOBUFS, unix.EINTR: // another overflow: drain on
				continue
			case unix.EAGAIN:
				return
			}
			derr = err
			return
		}
	})
	if err != nil {
		return err
	}
	return derr
}

func (s *subscription) close() error { return s.f.Close() }
