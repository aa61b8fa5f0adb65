package unitctl

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

const turn = "0123456789abcdef0123456789abcdef"

var (
	sock = "sandbox-broker@" + turn + ".socket"
	svc  = "sandbox-broker@" + turn + ".service"
)

// fakeConn answers like systemd over D-Bus: a job is queued, then its result
// arrives on the caller's channel from another goroutine (the library's
// signal loop), which must never block.
type fakeConn struct {
	mu        sync.Mutex
	calls     []string
	results   map[string]string // unit -> job result (default "done")
	callErr   map[string]error  // unit -> error of the queueing call
	resetErr  map[string]error
	units     []sddbus.UnitStatus
	listErr   error
	connected bool
	closed    bool
	delivered chan struct{}
	// props answers property reads: unit -> property -> value; a unit
	// absent here is not loaded.
	props map[string]map[string]any
	gets  []string // property reads, apart from calls
}

func newFake() *fakeConn {
	return &fakeConn{results: map[string]string{}, callErr: map[string]error{}, resetErr: map[string]error{}, connected: true, delivered: make(chan struct{}, 16)}
}

func (f *fakeConn) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeConn) job(verb, name, mode string, ch chan<- string) (int, error) {
	f.record(verb + " " + name + " " + mode)
	if err := f.callErr[name]; err != nil {
		return 0, err
	}
	result := f.results[name]
	if result == "" {
		result = "done"
	}
	go func() {
		// Like go-systemd's jobComplete: a blocking send here would stall
		// every later signal. Detect an unbuffered channel instead of hanging.
		select {
		case ch <- result:
		case <-time.After(time.Second):
			panic("job result channel is not buffered or nobody reads it")
		}
		f.delivered <- struct{}{}
	}()
	return 1, nil
}

func (f *fakeConn) StartUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	return f.job("start", name, mode, ch)
}
func (f *fakeConn) StopUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	return f.job("stop", name, mode, ch)
}
func (f *fakeConn) ResetFailedUnitContext(_ context.Context, name string) error {
	f.record("reset-failed " + name)
	return f.resetErr[name]
}
func (f *fakeConn) ListUnitsByPatternsContext(_ context.Context, states, patterns []string) ([]sddbus.UnitStatus, error) {
	f.record("list " + strings.Join(patterns, ","))
	return f.units, f.listErr
}
func (f *fakeConn) ListUnitsByNamesContext(_ context.Context, names []string) ([]sddbus.UnitStatus, error) {
	f.record("list-names " + strings.Join(names, ","))
	return f.units, f.listErr
}
func (f *fakeConn) GetUnitTypePropertyContext(_ context.Context, unit, typ, prop string) (*sddbus.Property, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets = append(f.gets, unit+" "+typ+"."+prop)
	p, ok := f.props[unit]
	if !ok {
		return nil, errNoSuchUnit
	}
	v, ok := p[prop]
	if !ok {
		return nil, errors.New("no such property")
	}
	return &sddbus.Property{Name: prop, Value: dbus.MakeVariant(v)}, nil
}
func (f *fakeConn) Connected() bool { return f.connected }
func (f *fakeConn) Close()          { f.closed = true; f.connected = false }

func managerWith(t *testing.T, conns ...*fakeConn) *Manager {
	t.Helper()
	i := 0
	m, err := connect(context.Background(), func(context.Context) (conn, error) {
		if i >= len(conns) {
			return nil, errors.New("no more connections")
		}
		c := conns[i]
		i++
		return c, nil
	})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return m
}

var errNoSuchUnit = dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit x not loaded."}}

// StartBroker is one D-Bus call: the service's start, whose transaction
// pulls in the socket and the credential set, waited for; every result but
// "done" is an error naming the unit.
func TestStartBroker(t *testing.T) {
	tests := []struct {
		name    string
		result  string
		callErr error
		wantErr error
	}{
		{"done", "done", nil, nil},
		{"failed", "failed", nil, ErrJob},
		{"timeout", "timeout", nil, ErrJob},
		{"dependency (socket or credential set failed)", "dependency", nil, ErrJob},
		{"canceled", "canceled", nil, ErrJob},
		{"refused by polkit", "", errors.New("Interactive authentication required."), ErrBus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.results[svc] = tt.result
			if tt.callErr != nil {
				f.callErr[svc] = tt.callErr
			}
			m := managerWith(t, f)
			err := m.StartBroker(context.Background(), turn)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("StartBroker = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), svc) {
				t.Errorf("error %q does not name the unit %s", err, svc)
			}
			if want := []string{"start " + svc + " fail"}; !slices.Equal(f.calls, want) {
				t.Errorf("calls = %v, want %v (one round trip)", f.calls, want)
			}
		})
	}
}

// StartBrokerService waits for the service job: a standby's broker must be
// known to run.
func TestStartBrokerServiceWaits(t *testing.T) {
	for _, tt := range []struct {
		result  string
		wantErr error
	}{{"done", nil}, {"failed", ErrJob}, {"timeout", ErrJob}, {"dependency", ErrJob}} {
		t.Run(tt.result, func(t *testing.T) {
			f := newFake()
			f.results[svc] = tt.result
			m := managerWith(t, f)
			err := m.StartBrokerService(context.Background(), turn)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("StartBrokerService = %v, want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), svc) {
				t.Errorf("error %q does not name the unit %s", err, svc)
			}
			if want := []string{"start " + svc + " fail"}; !slices.Equal(f.calls, want) {
				t.Errorf("calls = %v, want %v", f.calls, want)
			}
		})
	}
}

func TestStartBrokerRefusesBadTurn(t *testing.T) {
	f := newFake()
	m := managerWith(t, f)
	for _, bad := range []string{"", "../x", "evil.service", strings.Repeat("A", 32)} {
		if err := m.StartBroker(context.Background(), bad); err == nil {
			t.Errorf("StartBroker(%q) = nil, want error", bad)
		}
		if err := m.StopBroker(context.Background(), bad); err == nil {
			t.Errorf("StopBroker(%q) = nil, want error", bad)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("bad turn ids reached the bus: %v", f.calls)
	}
}

// The result channel must be buffered: a caller whose ctx ended stops
// reading, and the library's signal loop must still not block.
func TestStartBrokerCancelledDoesNotBlockSignals(t *testing.T) {
	f := newFake()
	m := managerWith(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := m.StartBroker(ctx, turn)
	// Either the result won the race or the cancellation did; both are fine.
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("StartBroker(cancelled) = %v", err)
	}
	select {
	case <-f.delivered:
	case <-time.After(3 * time.Second):
		t.Fatal("job result was never delivered: channel not buffered")
	}
}

func TestStopBroker(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(*fakeConn)
		wantErr   error
		wantCalls []string
	}{
		// Clean stops: CollectMode=inactive-or-failed unloads both units,
		// so no reset-failed round trips.
		{"both stopped", func(*fakeConn) {}, nil,
			[]string{"stop " + sock + " replace", "stop " + svc + " replace"}},
		{"not loaded counts as stopped", func(f *fakeConn) {
			f.callErr[sock] = errNoSuchUnit
			f.callErr[svc] = &errNoSuchUnit
		}, nil,
			[]string{"stop " + sock + " replace", "stop " + svc + " replace"}},
		// A failed stop still gets its reset-failed attempt and its error.
		{"service stop fails", func(f *fakeConn) { f.results[svc] = "failed" }, ErrJob,
			[]string{"stop " + sock + " replace", "stop " + svc + " replace", "reset-failed " + sock, "reset-failed " + svc}},
		{"service stop fails, units already gone", func(f *fakeConn) {
			f.results[svc] = "failed"
			f.resetErr[sock] = errNoSuchUnit
			f.resetErr[svc] = errors.New("Unit " + svc + " not loaded.")
		}, ErrJob,
			[]string{"stop " + sock + " replace", "stop " + svc + " replace", "reset-failed " + sock, "reset-failed " + svc}},
		{"bus error", func(f *fakeConn) { f.callErr[sock] = errors.New("Access denied") }, ErrBus,
			[]string{"stop " + sock + " replace", "stop " + svc + " replace", "reset-failed " + sock, "reset-failed " + svc}},
		{"stop fails and reset-failed refused", func(f *fakeConn) {
			f.results[sock] = "timeout"
			f.resetErr[svc] = errors.New("Access denied")
		}, ErrJob,
			[]string{"stop " + sock + " replace", "stop " + svc + " replace", "reset-failed " + sock, "reset-failed " + svc}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			tt.setup(f)
			m := managerWith(t, f)
			err := m.StopBroker(context.Background(), turn)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("StopBroker = %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(f.calls, tt.wantCalls) {
				t.Errorf("calls = %v, want %v", f.calls, tt.wantCalls)
			}
		})
	}
}

func TestListBrokers(t *testing.T) {
	other := "fedcba9876543210fedcba9876543210"
	f := newFake()
	f.units = []sddbus.UnitStatus{
		{Name: sock, LoadState: "loaded", ActiveState: "active"},
		{Name: svc, LoadState: "loaded", ActiveState: "failed"},
		{Name: "sandbox-broker@" + other + ".service", LoadState: "loaded", ActiveState: "inactive"},
		{Name: "sandbox-broker@bad.service", LoadState: "loaded"},
		{Name: "sandbox-broker@" + other + ".timer", LoadState: "loaded"},
		{Name: "sandbox-broker@fedcba9876543210fedcba98765432ff.socket", LoadState: "not-found"},
	}
	m := managerWith(t, f)
	got, err := m.ListBrokers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{turn, other}; !slices.Equal(got, want) {
		t.Errorf("ListBrokers = %v, want %v", got, want)
	}
	if want := []string{"list sandbox-broker@*"}; !slices.Equal(f.calls, want) {
		t.Errorf("calls = %v, want %v", f.calls, want)
	}
	f.listErr = errors.New("bus gone")
	if _, err := m.ListBrokers(context.Background()); !errors.Is(err, ErrBus) {
		t.Errorf("ListBrokers on a bus error = %v, want ErrBus", err)
	}
}

func TestHostActive(t *testing.T) {
	for _, tt := range []struct {
		state string
		want  bool
	}{
		{"active", true}, {"activating", true}, {"deactivating", true}, {"reloading", true},
		{"inactive", false}, {"failed", false}, {"", false},
	} {
		f := newFake()
		if tt.state != "" {
			f.units = []sddbus.UnitStatus{{Name: "sandbox-host.service", LoadState: "loaded", ActiveState: tt.state}}
		}
		m := managerWith(t, f)
		got, err := m.HostActive(context.Background())
		if err != nil || got != tt.want {
			t.Errorf("HostActive(state %q) = %v, %v; want %v", tt.state, got, err, tt.want)
		}
		if want := []string{"list-names sandbox-host.service"}; !slices.Equal(f.calls, want) {
			t.Errorf("calls = %v, want %v (read only)", f.calls, want)
		}
	}
}

func TestRedial(t *testing.T) {
	first, second := newFake(), newFake()
	m := managerWith(t, first, second)
	if err := m.StartBroker(context.Background(), turn); err != nil {
		t.Fatal(err)
	}
	first.connected = false // the bus dropped us
	if err := m.StartBroker(context.Background(), turn); err != nil {
		t.Fatalf("StartBroker after a drop = %v, want a redial", err)
	}
	if !first.closed || len(second.calls) != 1 { // the service's start
		t.Errorf("redial: old closed=%v, new calls=%v", first.closed, second.calls)
	}
	second.connected = false
	if err := m.StartBroker(context.Background(), turn); !errors.Is(err, ErrBus) {
		t.Errorf("StartBroker with no bus = %v, want ErrBus", err)
	}
	m.Close()
}

func TestConnectLifetimeEnded(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := connect(ctx, func(context.Context) (conn, error) { return f, nil })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	f.connected = false
	if err := m.StartBroker(context.Background(), turn); !errors.Is(err, context.Canceled) {
		t.Errorf("StartBroker after the lifetime ended = %v, want context.Canceled", err)
	}
}
