package unitctl

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// This file runs Manager over a real D-Bus: a private dbus-daemon (started
// and stopped by the test) with a stand-in systemd Manager object, so the
// library's job-signal path, error names and wire types are exercised.
// It skips when dbus-daemon is not installed.

const managerPath = dbus.ObjectPath("/org/freedesktop/systemd1")

type wireUnit struct {
	Name, Description, LoadState, ActiveState, SubState, Followed string
	Path                                                          dbus.ObjectPath
	JobID                                                         uint32
	JobType                                                       string
	JobPath                                                       dbus.ObjectPath
}

// fakeSystemd answers the Manager methods unitctl uses.
type fakeSystemd struct {
	conn *dbus.Conn

	mu         sync.Mutex
	loaded     map[string]string // unit -> ActiveState
	results    map[string]string // unit -> job result
	calls      []string
	nextJob    uint32
	subscribed int
}

func (f *fakeSystemd) job(verb, name, mode string) (dbus.ObjectPath, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, verb+" "+name+" "+mode)
	if _, ok := f.loaded[name]; !ok && verb == "stop" {
		return "", dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not loaded."})
	}
	f.nextJob++
	id := f.nextJob
	path := dbus.ObjectPath("/org/freedesktop/systemd1/job/" + itoa(id))
	result := f.results[name]
	if result == "" {
		result = "done"
	}
	if verb == "start" && result == "done" {
		f.loaded[name] = "active"
	}
	if verb == "stop" {
		f.loaded[name] = "inactive"
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		f.conn.Emit(managerPath, "org.freedesktop.systemd1.Manager.JobRemoved", id, path, name, result)
	}()
	return path, nil
}

func itoa(n uint32) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func (f *fakeSystemd) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return f.job("start", name, mode)
}

func (f *fakeSystemd) StopUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return f.job("stop", name, mode)
}

func (f *fakeSystemd) ResetFailedUnit(name string) *dbus.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "reset-failed "+name)
	if _, ok := f.loaded[name]; !ok {
		return dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not loaded."})
	}
	return nil
}

func (f *fakeSystemd) units(match func(string) bool) []wireUnit {
	var out []wireUnit
	for name, state := range f.loaded {
		if match(name) {
			out = append(out, wireUnit{Name: name, LoadState: "loaded", ActiveState: state, Path: "/org/freedesktop/systemd1/unit/x", JobPath: "/"})
		}
	}
	slices.SortFunc(out, func(a, b wireUnit) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (f *fakeSystemd) ListUnitsByPatterns(states, patterns []string) ([]wireUnit, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.units(func(n string) bool {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, n); ok {
				return true
			}
		}
		return false
	}), nil
}

func (f *fakeSystemd) ListUnitsByNames(names []string) ([]wireUnit, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.units(func(n string) bool { return slices.Contains(names, n) }), nil
}

func (f *fakeSystemd) Subscribe() *dbus.Error {
	f.mu.Lock()
	f.subscribed++
	f.mu.Unlock()
	return nil
}

// privateBus starts dbus-daemon on a socket in a temp dir and returns its
// address once the daemon listens: it prints the address only then (the
// socket file exists from bind, before listen, so waiting for the file
// could dial too early and be refused).
func privateBus(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("real-bus test skipped: dbus-daemon not installed")
	}
	sock := filepath.Join(t.TempDir(), "bus")
	cmd := exec.Command(bin, "--session", "--nofork", "--nopidfile", "--print-address=1", "--address=unix:path="+sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	printed := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		printed <- strings.TrimSpace(line)
	}()
	select {
	case addr := <-printed:
		if !strings.HasPrefix(addr, "unix:path="+sock) {
			t.Fatalf("dbus-daemon printed address %q, want one on %s", addr, sock)
		}
		return addr
	case <-time.After(30 * time.Second):
		t.Fatal("dbus-daemon printed no address within 30s")
		return ""
	}
}

func dialBus(addr string) dialFunc {
	return func(ctx context.Context) (conn, error) {
		return sddbus.NewConnection(func() (*dbus.Conn, error) {
			c, err := dbus.Dial(addr, dbus.WithContext(ctx))
			if err != nil {
				return nil, err
			}
			if err := c.Auth(nil); err != nil {
				c.Close()
				return nil, err
			}
			if err := c.Hello(); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		})
	}
}

func TestRealBus(t *testing.T) {
	addr := privateBus(t)
	sysConn, err := dialBus(addr)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sysConn.Close()
	// The stand-in systemd.
	sc, err := dbus.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if err := sc.Auth(nil); err != nil {
		t.Fatal(err)
	}
	if err := sc.Hello(); err != nil {
		t.Fatal(err)
	}
	failing := "fedcba9876543210fedcba9876543210"
	fake := &fakeSystemd{conn: sc, loaded: map[string]string{"sandbox-host.service": "activating"},
		results: map[string]string{"sandbox-broker@" + failing + ".service": "dependency"}}
	if err := sc.Export(fake, managerPath, "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	if reply, err := sc.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName = %v, %v", reply, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := connect(ctx, dialBus(addr))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer m.Close()

	if err := m.StartBroker(ctx, turn); err != nil {
		t.Fatalf("StartBroker over the bus: %v", err)
	}
	if err := m.StartBroker(ctx, failing); !errors.Is(err, ErrJob) || !strings.Contains(err.Error(), "sandbox-broker@"+failing+".service") {
		t.Errorf("StartBroker(failing) = %v, want ErrJob naming the unit", err)
	}
	got, err := m.ListBrokers(ctx)
	if err != nil || !slices.Equal(got, []string{turn}) {
		t.Errorf("ListBrokers = %v, %v; want [%s]", got, err, turn)
	}
	if up, err := m.HostActive(ctx); err != nil || !up {
		t.Errorf("HostActive = %v, %v; want true (activating)", up, err)
	}
	// Both units stop cleanly: no reset-failed follows.
	if err := m.StopBroker(ctx, turn); err != nil {
		t.Errorf("StopBroker = %v", err)
	}
	fake.mu.Lock()
	calls := slices.Clone(fake.calls)
	subscribed := fake.subscribed
	fake.mu.Unlock()
	want := []string{
		"start " + svc + " fail", // one call: the socket and credential set come with it
		"start sandbox-broker@" + failing + ".service fail",
		"stop " + sock + " replace",
		"stop " + svc + " replace",
	}
	if !slices.Equal(calls, want) {
		t.Errorf("systemd saw %q, want %q", calls, want)
	}
	// Job results come without a subscription (systemd tracks a job's
	// requester); a subscriber would make PID 1 broadcast every unit change.
	if subscribed != 0 {
		t.Errorf("Subscribe called %d times, want 0", subscribed)
	}
}
