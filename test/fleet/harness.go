package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	pfleet "github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats"
)

// Options shape a fleet.
type Options struct {
	// Dir holds the run's files (certificates, keys, stores, logs).
	Dir string
	// Servers is the number of boxes (each a nats-server; box processes
	// are started apart, StartBox).
	Servers    int
	Partitions int
	Replicas   int
	AckWait    time.Duration
	// Slots is each box's capacity (stub turns at once).
	Slots int
	// Stub is the stub turn's duration.
	Stub time.Duration
	// DiskBox, when > 0, is the box whose JetStream store is a tmpfs of
	// DiskMB megabytes (the full-disk fault).
	DiskBox, DiskMB int
	// Bin holds fleetit and sandbox-nats (Build).
	Bin string
	// Log receives the harness's progress lines.
	Log io.Writer
}

// Build compiles fleetit (with the fleetstub tag) and sandbox-nats into dir.
func Build(ctx context.Context, root, dir string) error {
	for _, b := range [][]string{
		{"build", "-tags", "fleetstub", "-o", filepath.Join(dir, "fleetit"), "./test/fleet/fleetit"},
		{"build", "-o", filepath.Join(dir, "sandbox-nats"), "./cmd/sandbox-nats"},
	} {
		cmd := exec.CommandContext(ctx, "go", b...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v: %s", strings.Join(b, " "), err, out)
		}
	}
	return nil
}

// Line is one JSON line of a fleetit process (fleetit/main.go).
type Line struct {
	Ev      string `json:"ev"`
	T       int64  `json:"t"`
	Box     string `json:"box,omitempty"`
	Turn    string `json:"turn,omitempty"`
	Channel string `json:"ch,omitempty"`
	Gen     uint64 `json:"gen,omitempty"`
	TookNs  int64  `json:"took,omitempty"`
	ExecNs  int64  `json:"exec,omitempty"`
	// Steps: a committed turn's time by step (ns, fleet.StepNames).
	Steps  map[string]int64 `json:"steps,omitempty"`
	Err    string           `json:"err,omitempty"`
	Audit  string           `json:"audit,omitempty"`
	Clean  bool             `json:"clean,omitempty"`
	Lost   int              `json:"lost,omitempty"`
	Dup    int              `json:"dup,omitempty"`
	Reord  int              `json:"reord,omitempty"`
	Extra  int              `json:"extra,omitempty"`
	Turns  int              `json:"turns,omitempty"`
	Failed int              `json:"failed,omitempty"`
	Double int              `json:"double,omitempty"` // turns run more than once (Audit.DoubleRuns)
}

// proc is one process in a box's namespace.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}
	ready  chan struct{}
	once   sync.Once
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) signal(s syscall.Signal) error { return p.cmd.Process.Signal(s) }

// Fleet is a running fleet on this machine.
type Fleet struct {
	o   Options
	net *network
	pki pki
	// seeds by user name; users lists them for the servers.
	seeds  map[string]string
	users  []config.FleetBox
	encKey string

	closeMu sync.Mutex // Close, from a signal's goroutine too
	mu      sync.Mutex
	servers map[int]*proc
	boxes   map[int]*proc
	procs   []*proc
	mounts  []string
	rec     *Recorder
	drivers map[*Driver][]string // running drivers' channels
}

// BoxName is box i's name.
func BoxName(i int) string { return fmt.Sprintf("box%d", i) }

// driverHost is the driver's host number.
const driverHost = 200

func (f *Fleet) logf(format string, a ...any) {
	if f.o.Log != nil {
		fmt.Fprintf(f.o.Log, "fleet: "+format+"\n", a...)
	}
}

// Start makes the network, the PKI and the users, and starts every box's
// nats-server, waiting until each logs that it is ready.
func Start(ctx context.Context, o Options) (f *Fleet, err error) {
	f = &Fleet{o: o, seeds: map[string]string{}, servers: map[int]*proc{}, boxes: map[int]*proc{}, rec: NewRecorder(), drivers: map[*Driver][]string{}}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return f, err
	}
	if f.net, err = newNetwork(); err != nil {
		return f, err
	}
	for i := 1; i <= o.Servers; i++ {
		if err := f.net.addHost(i); err != nil {
			return f, err
		}
	}
	if err := f.net.addHost(driverHost); err != nil {
		return f, err
	}
	if f.pki, err = newPKI(o.Dir, o.Servers); err != nil {
		return f, err
	}
	names := []string{"driver"}
	for i := 1; i <= o.Servers; i++ {
		names = append(names, BoxName(i))
	}
	for _, n := range names {
		seed := filepath.Join(o.Dir, n+".nkey")
		pub, err := newUser(seed)
		if err != nil {
			return f, err
		}
		f.seeds[n] = seed
		f.users = append(f.users, config.FleetBox{Name: n, NKey: pub})
	}
	f.encKey = filepath.Join(o.Dir, "jetstream.key")
	if err := newEncryptionKey(f.encKey); err != nil {
		return f, err
	}
	for i := 1; i <= o.Servers; i++ {
		store := filepath.Join(o.Dir, fmt.Sprintf("store%d", i))
		if err := os.MkdirAll(store, 0o700); err != nil {
			return f, err
		}
		if i == o.DiskBox && o.DiskMB > 0 {
			if err := run("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0700", o.DiskMB), "sbxf-store", store); err != nil {
				return f, err
			}
			f.mounts = append(f.mounts, store)
		}
		if err := f.writeServerConfig(i, store); err != nil {
			return f, err
		}
	}
	for i := 1; i <= o.Servers; i++ {
		if _, err := f.StartServer(i); err != nil {
			return f, err
		}
	}
	for i := 1; i <= o.Servers; i++ {
		if err := f.waitReady(ctx, f.servers[i]); err != nil {
			return f, err
		}
	}
	f.logf("%d nats-servers ready (TLS, nkeys, encryption at rest, R%d, %d partitions)", o.Servers, o.Replicas, o.Partitions)
	return f, nil
}

func (f *Fleet) writeServerConfig(i int, store string) error {
	var routes []string
	for j := 1; j <= f.o.Servers; j++ {
		if j != i {
			routes = append(routes, fmt.Sprintf("tls://%s:6222", addr(j)))
		}
	}
	fc := config.Fleet{
		Enabled: true, Box: BoxName(i), Partitions: f.o.Partitions, Replicas: f.o.Replicas,
		TLS: config.FleetTLS{CA: f.pki.ca, Cert: f.pki.cert, Key: f.pki.key},
		Server: config.FleetServer{
			Listen: addr(i) + ":4222", ClusterListen: addr(i) + ":6222", Routes: routes,
			StoreDir: store, EncryptionKeyFile: f.encKey, Boxes: f.users,
		},
	}
	conf, err := fleetnats.ServerConfig(fc, fleetnats.TLSFiles{CA: f.pki.ca, Cert: f.pki.cert, Key: f.pki.key})
	if err != nil {
		return err
	}
	return os.WriteFile(f.confPath(i), conf, 0o600)
}

func (f *Fleet) confPath(i int) string { return filepath.Join(f.o.Dir, fmt.Sprintf("nats%d.conf", i)) }

// spawn starts a process in host i's namespace; stdout lines go to onLine
// (JSON of fleetit) and, with readyText, a stderr line containing it
// closes ready; stderr is kept in Dir.
func (f *Fleet) spawn(host int, name string, readyText string, onLine func(Line), args ...string) (*proc, error) {
	full := append([]string{"netns", "exec", f.net.ns(host)}, args...)
	cmd := exec.Command("ip", full...)
	logf, err := os.OpenFile(filepath.Join(f.o.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Its own process group: the harness's signals (a ^C) reach the
	// harness, which stops its processes itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, stdin: stdin, exited: make(chan struct{}), ready: make(chan struct{})}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l Line
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			if l.Ev == "ready" {
				p.once.Do(func() { close(p.ready) })
			}
			if onLine != nil {
				onLine(l)
			}
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			// Stamped here: nats-server's lines carry no time (its
			// logtime is off: the journal stamps them in production),
			// and a tail is read by lining them up with the boxes'.
			fmt.Fprintln(logf, time.Now().UTC().Format("15:04:05.000"), sc.Text())
			if readyText != "" && strings.Contains(sc.Text(), readyText) {
				p.once.Do(func() { close(p.ready) })
			}
		}
	}()
	go func() {
		wg.Wait()
		_ = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// waitReady waits for p's ready line (or its exit, an error).
func (f *Fleet) waitReady(ctx context.Context, p *proc) error {
	select {
	case <-p.ready:
		return nil
	case <-p.exited:
		return fmt.Errorf("%s exited before it was ready; its log ends:\n%s", p.name, f.logTail(p.name))
	case <-ctx.Done():
		return fmt.Errorf("%s not ready: %w", p.name, ctx.Err())
	}
}

// logTail is the end of a process's log (the harness's own files).
func (f *Fleet) logTail(name string) string {
	data, _ := os.ReadFile(filepath.Join(f.o.Dir, name+".log"))
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// StartServer starts box i's nats-server (it is ready when its process's
// ready channel closes: WaitServer).
func (f *Fleet) StartServer(i int) (*proc, error) {
	p, err := f.spawn(i, fmt.Sprintf("nats%d", i), "Server is ready", nil,
		filepath.Join(f.o.Bin, "sandbox-nats"), "--config", f.confPath(i), "--encryption-key-file", f.encKey)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.servers[i] = p
	f.mu.Unlock()
	return p, nil
}

func (f *Fleet) common(host int, name string) []string {
	return []string{
		"-url", fmt.Sprintf("tls://%s:4222", addr(host)),
		"-ca", f.pki.ca, "-cert", f.pki.cert, "-key", f.pki.key, "-seed", f.seeds[name], "-name", name,
		"-partitions", fmt.Sprint(f.o.Partitions), "-replicas", fmt.Sprint(f.o.Replicas),
	}
}

// StartBoxes starts the box processes of peers together (a box that
// started alone would take every partition's pin after its standby delay)
// and waits until each joined its partitions.
func (f *Fleet) StartBoxes(ctx context.Context, peers []int) error {
	for _, i := range peers {
		if _, err := f.spawnBox(i, peers); err != nil {
			return err
		}
	}
	for _, i := range peers {
		if err := f.waitReady(ctx, f.Box(i)); err != nil {
			return err
		}
	}
	return nil
}

// StartBox starts box i's box process, connected to its own nats-server,
// standing by for peers' partitions, and waits until it joined them.
func (f *Fleet) StartBox(ctx context.Context, i int, peers []int) error {
	p, err := f.spawnBox(i, peers)
	if err != nil {
		return err
	}
	return f.waitReady(ctx, p)
}

func (f *Fleet) spawnBox(i int, peers []int) (*proc, error) {
	var names []string
	for _, p := range peers {
		names = append(names, BoxName(p))
	}
	args := append([]string{filepath.Join(f.o.Bin, "fleetit"), "box"}, f.common(i, BoxName(i))...)
	args = append(args, "-peers", strings.Join(names, ","), "-ack-wait", f.o.AckWait.String(),
		"-slots", fmt.Sprint(f.o.Slots), "-stub", f.o.Stub.String())
	p, err := f.spawn(i, BoxName(i), "", f.rec.boxLine, args...)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.boxes[i] = p
	f.mu.Unlock()
	return p, nil
}

// Box returns box i's process.
func (f *Fleet) Box(i int) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boxes[i]
}

// Server returns box i's nats-server process.
func (f *Fleet) Server(i int) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[i]
}

// StopBox stops box i's process (SIGTERM: it leaves its partitions) and
// waits for its exit.
func (f *Fleet) StopBox(ctx context.Context, i int) error {
	p := f.Box(i)
	if p == nil {
		return nil
	}
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-ctx.Done():
		_ = p.signal(syscall.SIGKILL)
		return fmt.Errorf("%s did not stop: %w", p.name, ctx.Err())
	}
}

// Kill sends SIGKILL to p and waits for its exit.
func (f *Fleet) Kill(p *proc) {
	_ = p.signal(syscall.SIGKILL)
	<-p.exited
}

// Driver is the running driver process.
type Driver struct {
	f     *Fleet
	p     *proc
	audit chan Line
}

// driverChannels are the running drivers' channels.
func (f *Fleet) driverChannels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, cs := range f.drivers {
		out = append(out, cs...)
	}
	return out
}

// StartDriver submits turns on channels prefix-000.. (window in flight
// each) until Stop.
func (f *Fleet) StartDriver(ctx context.Context, prefix string, channels, window int) (*Driver, error) {
	var urls []string
	for i := 1; i <= f.o.Servers; i++ {
		urls = append(urls, fmt.Sprintf("tls://%s:4222", addr(i)))
	}
	args := append([]string{filepath.Join(f.o.Bin, "fleetit"), "drive"}, f.common(driverHost, "driver")...)
	args[3] = strings.Join(urls, ",") // -url value
	args = append(args, "-prefix", prefix, "-channels", fmt.Sprint(channels), "-window", fmt.Sprint(window))
	d := &Driver{f: f, audit: make(chan Line, 1)}
	p, err := f.spawn(driverHost, "driver-"+prefix, "", func(l Line) {
		if l.Ev == "audit" {
			d.audit <- l
			return
		}
		f.rec.driverLine(l)
	}, args...)
	if err != nil {
		return nil, err
	}
	d.p = p
	f.mu.Lock()
	f.drivers[d] = ChannelNames(prefix, channels, f.o.Partitions)
	f.mu.Unlock()
	return d, f.waitReady(ctx, p)
}

// Stop asks the driver to stop submitting, waits for its outstanding
// replies and returns its audit.
func (d *Driver) Stop(ctx context.Context) (Line, error) {
	d.f.mu.Lock()
	delete(d.f.drivers, d)
	d.f.mu.Unlock()
	fmt.Fprintln(d.p.stdin, "stop")
	select {
	case l := <-d.audit:
		<-d.p.exited
		return l, nil
	case <-d.p.exited:
		select {
		case l := <-d.audit:
			return l, nil
		default:
		}
		return Line{}, fmt.Errorf("the driver exited without an audit (see its log)")
	case <-ctx.Done():
		return Line{}, fmt.Errorf("driver stop: %w", ctx.Err())
	}
}

// Inspect returns, one line per partition, the turns group's consumers as
// the cluster sees them from the driver's namespace (leader, pin, waiting
// pulls, pending turns): diagnostics for a fault that did not heal.
func (f *Fleet) Inspect(ctx context.Context) string {
	var urls []string
	for i := 1; i <= f.o.Servers; i++ {
		urls = append(urls, fmt.Sprintf("tls://%s:4222", addr(i)))
	}
	args := append([]string{"netns", "exec", f.net.ns(driverHost), filepath.Join(f.o.Bin, "fleetit"), "inspect"}, f.common(driverHost, "driver")...)
	args[6] = strings.Join(urls, ",") // -url value
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("inspect: %v: %s", err, out)
	}
	return string(out)
}

// Leaders returns, for each named stream, the number of the box whose
// server leads it (0: none known), as the driver's namespace sees it.
func (f *Fleet) Leaders(ctx context.Context, streams ...string) []int {
	var urls []string
	for i := 1; i <= f.o.Servers; i++ {
		urls = append(urls, fmt.Sprintf("tls://%s:4222", addr(i)))
	}
	args := append([]string{"netns", "exec", f.net.ns(driverHost), filepath.Join(f.o.Bin, "fleetit"), "leader"}, f.common(driverHost, "driver")...)
	args[6] = strings.Join(urls, ",") // -url value
	args = append(args, streams...)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(cctx, "ip", args...).Output()
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	got := make([]int, len(streams))
	for k := range got {
		if k < len(lines) {
			got[k] = boxNum(strings.TrimSpace(lines[k]))
		}
	}
	return got
}

// Cut cuts (cut=true) or restores the network between boxes i and j only:
// each keeps its link to every other box (a partial cut).
func (f *Fleet) Cut(i, j int, cut bool) error { return f.net.cut(i, j, cut) }

// Recorder returns what the boxes and the driver reported.
func (f *Fleet) Recorder() *Recorder { return f.rec }

// Link cuts or restores box i's link.
func (f *Fleet) Link(i int, up bool) error { return f.net.link(i, up) }

// StoreDir is box i's JetStream store.
func (f *Fleet) StoreDir(i int) string { return filepath.Join(f.o.Dir, fmt.Sprintf("store%d", i)) }

// Close kills every process, unmounts the stores and deletes the
// namespaces. Safe to call more than once.
func (f *Fleet) Close() {
	f.closeMu.Lock()
	defer f.closeMu.Unlock()
	f.mu.Lock()
	procs := f.procs
	f.procs = nil
	f.mu.Unlock()
	for _, p := range procs {
		_ = p.signal(syscall.SIGCONT)
		_ = p.signal(syscall.SIGKILL)
	}
	for _, p := range procs {
		<-p.exited
	}
	for _, m := range f.mounts {
		_ = run("umount", m)
	}
	f.mounts = nil
	if f.net != nil {
		f.net.close()
	}
}

// DefaultAckWait is the engine's default AckWait (failover within about
// twice it).
func DefaultAckWait() time.Duration { return pfleet.DefaultAckWait }
