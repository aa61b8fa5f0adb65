package safefetch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nlAttr is one rtattr of a hand-built address message.
type nlAttr struct {
	typ uint16
	val []byte
}

// addrMsg builds one netlink message: nlmsghdr, ifaddrmsg, rtattrs.
func addrMsg(typ, flags uint16, family uint8, index uint32, attrs ...nlAttr) []byte {
	body := make([]byte, unix.SizeofIfAddrmsg)
	body[0] = family
	binary.NativeEndian.PutUint32(body[4:], index)
	for _, a := range attrs {
		l := unix.SizeofRtAttr + len(a.val)
		b := make([]byte, (l+3)&^3)
		binary.NativeEndian.PutUint16(b, uint16(l))
		binary.NativeEndian.PutUint16(b[2:], a.typ)
		copy(b[4:], a.val)
		body = append(body, b...)
	}
	h := make([]byte, unix.NLMSG_HDRLEN)
	binary.NativeEndian.PutUint32(h, uint32(len(h)+len(body)))
	binary.NativeEndian.PutUint16(h[4:], typ)
	binary.NativeEndian.PutUint16(h[6:], flags)
	return append(h, body...)
}

// addrEvent is an RTM_NEWADDR or RTM_DELADDR for a on interface index.
func addrEvent(typ uint16, index uint32, a string) []byte {
	ip := netip.MustParseAddr(a)
	fam := uint8(unix.AF_INET6)
	if ip.Is4() {
		fam = unix.AF_INET
	}
	return addrMsg(typ, 0, fam, index, nlAttr{unix.IFA_ADDRESS, ip.AsSlice()})
}

func doneMsg() []byte {
	h := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(h, uint32(len(h)))
	binary.NativeEndian.PutUint16(h[4:], unix.NLMSG_DONE)
	return h
}

// dumpOf is a full dump holding NEWADDR for each index/address pair.
func dumpOf(pairs ...any) []byte {
	var b []byte
	for i := 0; i < len(pairs); i += 2 {
		b = append(b, addrEvent(unix.RTM_NEWADDR, uint32(pairs[i].(int)), pairs[i+1].(string))...)
	}
	return append(b, doneMsg()...)
}

type recvResult struct {
	b          []byte
	fromKernel bool
	err        error
}

// fakeSource hands the watch what the test sends, one datagram a recv.
type fakeSource struct {
	ch       chan recvResult
	closed   chan struct{}
	once     sync.Once
	drains   atomic.Int64
	drainErr chan error // an error the next drain returns
}

func newFakeSource() *fakeSource {
	return &fakeSource{ch: make(chan recvResult), closed: make(chan struct{}), drainErr: make(chan error, 1)}
}

func (f *fakeSource) recv(buf []byte) (int, bool, error) {
	select {
	case r := <-f.ch:
		return copy(buf, r.b), r.fromKernel, r.err
	case <-f.closed:
		return 0, false, errors.New("use of closed file")
	}
}

func (f *fakeSource) drain() error {
	select {
	case err := <-f.drainErr:
		return err
	default:
		f.drains.Add(1)
		return nil
	}
}

func (f *fakeSource) close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// fakeDump answers dumps from a queue (the last one repeats).
type fakeDump struct {
	mu    sync.Mutex
	queue []func() ([]byte, error)
	calls int
}

func (d *fakeDump) dump() ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.queue[min(d.calls, len(d.queue)-1)]
	d.calls++
	return f()
}

func (d *fakeDump) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

func answers(b []byte) func() ([]byte, error) { return func() ([]byte, error) { return b, nil } }

// waitState waits, through the watch's publication channel (never a sleep),
// until cond holds for the published state.
func waitState(t *testing.T, w *AddrWatch, what string, cond func(*addrState) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		s := w.current()
		if cond(s) {
			return
		}
		select {
		case <-s.next:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s (state: %d addresses, err %v)", what, len(s.set), s.err)
		}
	}
}

func has(a string) func(*addrState) bool {
	return func(s *addrState) bool {
		_, ok := s.set[netip.MustParseAddr(a)]
		return s.err == nil && ok
	}
}

func hasNot(a string) func(*addrState) bool {
	return func(s *addrState) bool {
		_, ok := s.set[netip.MustParseAddr(a)]
		return s.err == nil && !ok
	}
}

func contains(t *testing.T, w *AddrWatch, a string) bool {
	t.Helper()
	ok, err := w.Contains(netip.MustParseAddr(a))
	if err != nil {
		t.Fatalf("Contains(%s): %v", a, err)
	}
	return ok
}

func newTestWatch(t *testing.T, d *fakeDump, log *slog.Logger) (*AddrWatch, *fakeSource) {
	t.Helper()
	src := newFakeSource()
	w, err := newAddrWatch(log, src, d.dump)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, src
}

func TestAddrWatchEvents(t *testing.T) {
	d := &fakeDump{queue: []func() ([]byte, error){answers(dumpOf(1, "127.0.0.1", 2, "8.8.4.4", 2, "2001:4860:4860::8844"))}}
	w, src := newTestWatch(t, d, nil)
	for _, a := range []string{"127.0.0.1", "8.8.4.4", "2001:4860:4860::8844"} {
		if !contains(t, w, a) {
			t.Errorf("%s from the dump is missing", a)
		}
	}
	send := func(r recvResult) { src.ch <- r }
	kernel := func(b ...[]byte) { send(recvResult{b: bytes.Join(b, nil), fromKernel: true}) }

	kernel(addrEvent(unix.RTM_NEWADDR, 3, "9.9.9.9"))
	waitState(t, w, "9.9.9.9 added", has("9.9.9.9"))

	// The same address on a second interface: dropping it from one keeps it.
	kernel(addrEvent(unix.RTM_NEWADDR, 4, "8.8.4.4"))
	kernel(addrEvent(unix.RTM_DELADDR, 2, "8.8.4.4"), addrEvent(unix.RTM_NEWADDR, 3, "1.0.0.1")) // one datagram, two messages
	waitState(t, w, "the marker 1.0.0.1", has("1.0.0.1"))
	if !contains(t, w, "8.8.4.4") {
		t.Error("8.8.4.4 left the set while interface 4 still carries it")
	}
	kernel(addrEvent(unix.RTM_DELADDR, 4, "8.8.4.4"))
	waitState(t, w, "8.8.4.4 removed", hasNot("8.8.4.4"))

	// A message another process sent is not the kernel's word.
	send(recvResult{b: addrEvent(unix.RTM_DELADDR, 3, "9.9.9.9")})
	kernel(addrEvent(unix.RTM_NEWADDR, 3, "1.0.0.2"))
	waitState(t, w, "the marker 1.0.0.2", has("1.0.0.2"))
	if !contains(t, w, "9.9.9.9") {
		t.Error("a forged deletion removed 9.9.9.9")
	}

	// Point to point: IFA_LOCAL is ours, IFA_ADDRESS the peer's.
	kernel(addrMsg(unix.RTM_NEWADDR, 0, unix.AF_INET, 5,
		nlAttr{unix.IFA_ADDRESS, []byte{192, 0, 2, 2}}, nlAttr{unix.IFA_LOCAL, []byte{5, 6, 7, 8}}))
	waitState(t, w, "the point-to-point local address", has("5.6.7.8"))
	if contains(t, w, "192.0.2.2") {
		t.Error("the point-to-point peer's address was taken as the box's")
	}

	// Other message types and families change nothing (and publish nothing).
	otherFamily := addrMsg(unix.RTM_NEWADDR, 0, unix.AF_PACKET, 6, nlAttr{unix.IFA_ADDRESS, []byte{1, 2}})
	otherType := addrMsg(unix.RTM_NEWLINK, 0, unix.AF_INET, 6, nlAttr{unix.IFA_ADDRESS, []byte{1, 2, 3, 4}})
	kernel(otherFamily, otherType, addrEvent(unix.RTM_NEWADDR, 6, "1.0.0.3"))
	waitState(t, w, "the marker 1.0.0.3", has("1.0.0.3"))
	if contains(t, w, "1.2.3.4") {
		t.Error("an RTM_NEWLINK was read as an address")
	}
}

// TestWatchLocalAddrs: the real watch on this machine holds every address
// the standard library lists for its interfaces.
func TestWatchLocalAddrs(t *testing.T) {
	w, err := WatchLocalAddrs(nil)
	if err != nil {
		t.Fatalf("rtnetlink: %v", err)
	}
	defer w.Close()
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifa := range ifas {
		p, err := netip.ParsePrefix(ifa.String())
		if err != nil {
			t.Fatal(err)
		}
		if !contains(t, w, p.Addr().String()) {
			t.Errorf("%s (an address of this machine) is not in the watch", p.Addr())
		}
	}
	if contains(t, w, "192.0.2.1") {
		t.Error("a documentation address is this machine's?")
	}
}

// TestAddrWatchENOBUFS: dropped events make the set unknown until a new full
// dump replaces it.
func TestAddrWatchENOBUFS(t *testing.T) {
	d := &fakeDump{queue: []func() ([]byte, error){
		answers(dumpOf(1, "8.8.4.4")),
		answers(dumpOf(1, "8.8.4.4", 7, "4.4.4.4")), // what the lost events added
	}}
	var logs bytes.Buffer
	w, src := newTestWatch(t, d, slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil)))
	before := w.current()
	src.ch <- recvResult{err: unix.ENOBUFS}
	waitState(t, w, "the dump after ENOBUFS", has("4.4.4.4"))
	<-before.next // closed already: waitState saw a newer state
	if gap := before.newer; !errors.Is(gap.err, errEventsLost) || !errors.Is(gap.err, errLocalUnknown) {
		t.Errorf("state after the lost events: err %v, want the set unknown until the new dump", gap.err)
	}
	if n := w.resyncs.Load(); n != 1 {
		t.Errorf("resyncs = %d, want 1", n)
	}
	if n := d.count(); n != 2 {
		t.Errorf("dumps = %d, want 2", n)
	}
	if n := src.drains.Load(); n != 1 {
		t.Errorf("drains = %d, want 1 (before the dump)", n)
	}
	if !strings.Contains(logs.String(), "system=netlink") {
		t.Errorf("no log line blaming netlink: %q", logs.String())
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestAddrWatchFailsClosed: every way the set stops being known leaves
// Contains failing (so the dialer refuses) and logs the cause once,
// blaming netlink.
func TestAddrWatchFailsClosed(t *testing.T) {
	short := addrEvent(unix.RTM_NEWADDR, 1, "8.8.8.8")[:unix.NLMSG_HDRLEN+4]
	binary.NativeEndian.PutUint32(short, uint32(len(short)))
	wrongLen := addrMsg(unix.RTM_NEWADDR, 0, unix.AF_INET, 1, nlAttr{unix.IFA_ADDRESS, make([]byte, 16)})
	cases := []struct {
		name     string
		dumps    []func() ([]byte, error)
		send     recvResult
		want     string
		drainErr error
	}{
		{"dump fails after dropped events", []func() ([]byte, error){answers(dumpOf(1, "8.8.4.4")), func() ([]byte, error) { return nil, unix.EMFILE }},
			recvResult{err: unix.ENOBUFS}, "RTM_GETADDR dump", nil},
		{"drain fails after dropped events", []func() ([]byte, error){answers(dumpOf(1, "8.8.4.4"))}, recvResult{err: unix.ENOBUFS}, "draining address events", unix.EBADF},
		{"read error", []func() ([]byte, error){answers(dumpOf(1, "8.8.4.4"))}, recvResult{err: unix.EINVAL}, "reading address events", nil},
		{"short message", []func() ([]byte, error){answers(dumpOf(1, "8.8.4.4"))}, recvResult{b: short, fromKernel: true}, "short address message", nil},
		{"address of the wrong length", []func() ([]byte, error){answers(dumpOf(1, "8.8.4.4"))}, recvResult{b: wrongLen, fromKernel: true}, "carries 16 address bytes", nil},
		{"truncated datagram", []func() ([]byte, error){answers(dumpOf(1, "8.8.4.4"))}, recvResult{b: []byte{1, 2, 3}, fromKernel: true}, "parsing address events", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			d := &fakeDump{queue: tc.dumps}
			w, src := newTestWatch(t, d, slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil)))
			if !contains(t, w, "8.8.4.4") {
				t.Fatal("8.8.4.4 from the dump is missing")
			}
			if tc.drainErr != nil {
				src.drainErr <- tc.drainErr
			}
			src.ch <- tc.send
			select { // the watch gave up
			case <-w.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the watch went on after the failure")
			}
			ok, err := w.Contains(netip.MustParseAddr("1.1.1.1"))
			if ok || !errors.Is(err, errLocalUnknown) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Contains after the failure = %v, %v; want errLocalUnknown naming %q", ok, err, tc.want)
			}
			if c := ClassifyLocal(netip.MustParseAddr("1.1.1.1"), w); c != ClassLocalUnknown {
				t.Errorf("class %s, want %s", c, ClassLocalUnknown)
			}
			if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "system=netlink") {
				t.Errorf("want one error line blaming netlink, got %q", logs.String())
			}
		})
	}
}

func TestAddrWatchStart(t *testing.T) {
	intr := dumpOf(1, "8.8.4.4")
	binary.NativeEndian.PutUint16(intr[6:], unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR)
	// An interrupted dump is read again.
	d := &fakeDump{queue: []func() ([]byte, error){answers(intr), answers(dumpOf(1, "8.8.4.4", 2, "9.9.9.9"))}}
	w, _ := newTestWatch(t, d, nil)
	if !contains(t, w, "9.9.9.9") || d.count() != 2 {
		t.Errorf("after an interrupted dump: 9.9.9.9 %v, dumps %d", contains(t, w, "9.9.9.9"), d.count())
	}
	// Always interrupted, or failing: no watch.
	for _, d := range []*fakeDump{
		{queue: []func() ([]byte, error){answers(intr)}},
		{queue: []func() ([]byte, error){func() ([]byte, error) { return nil, unix.EAFNOSUPPORT }}},
	} {
		src := newFakeSource()
		if w, err := newAddrWatch(nil, src, d.dump); err == nil {
			w.Close()
			t.Errorf("newAddrWatch started on a dump that cannot be read (%d dumps)", d.count())
		}
	}
	// Closed: unknown.
	w.Close()
	if _, err := w.Contains(netip.MustParseAddr("9.9.9.9")); !errors.Is(err, errWatchClosed) {
		t.Errorf("Contains after Close: %v", err)
	}
}
