// Package fleet holds the fleet's end-to-end scenario: two boxes, each a
// namespaced systemd 252 with its own dockerd and its own dpkg install of
// the same .deb (test/e2e/lib/fleet.sh boots them), set up as docs/fleet.md
// tells an operator (a CA and a certificate per box made with openssl, each
// box's nkey from `sandbox-host fleet nkey`, sandbox.yaml's fleet.*, the
// shipped drop-in for the host's network, sandbox-nats enabled), then real
// sealed turns (containers, broker units, each box's own fake model and
// credential) submitted to box 1 through its CLI and host.sock.
//
// The cluster is the two boxes' servers with fleet.replicas 1: the fault
// here is a host, not a server, and a two-server cluster's meta group needs
// both servers up either way (R3 would need a third, nats-only node: one
// more namespace on a small machine, for what test/fleet and
// pkg/fleetnats already test with three servers).
//
// The scenario runs on the machine's side and acts on each box through
// nsenter (its mount, PID, UTS, IPC and network namespaces): that box's
// CLI, systemctl, journalctl and docker. It never opens a network
// connection itself. Only with SANDBOX_E2E_FLEET=1, which
// test/e2e/fleet/run.sh (`make e2e-fleet`) sets; plain `go test ./...`
// skips it.
package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

const envSwitch = "SANDBOX_E2E_FLEET"

// partitions is fleet.partitions: few, so that each box's idle pinned
// consumers cost little on a small machine; the balanced assignment gives
// even partitions to box1 and odd ones to box2 (sorted names).
const partitions = 4

// fleetDir is where docs/fleet.md has the operator put the fleet's files.
const fleetDir = "/etc/roundtable-sandbox/fleet"

// box is one namespaced box.
type box struct {
	n         int
	name      string // fleet.box
	pid       int    // its systemd (PID 1 of its namespaces) as the machine sees it
	addr      string // its eth0 address on the switch
	work      string // its directory under FLEET_TOP (visible inside it)
	cred      string // its model credential (never leaves it)
	nkey      string // its public user nkey
	records   string // its fake model's record file
	modelPort int
}

var (
	top    string
	boxes  []*box
	setupT = time.Now()
)

func TestMain(m *testing.M) {
	if os.Getenv(envSwitch) != "1" {
		fmt.Printf("fleet e2e skipped: set %s=1 (make e2e-fleet runs it on two namespaced systemd boxes with the installed .deb)\n", envSwitch)
		os.Exit(0)
	}
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "fleet e2e setup failed: %v\n", err)
		for _, b := range boxes {
			out, _ := b.sh("journalctl --no-pager -o short-monotonic -u sandbox-nats -u sandbox-host | tail -60")
			fmt.Fprintf(os.Stderr, "--- %s: journal of sandbox-nats and sandbox-host ---\n%s\n", b.name, out)
		}
		os.Exit(1)
	}
	fmt.Printf("fleet e2e: both boxes set up and joined in %.1f s\n", time.Since(setupT).Seconds())
	os.Exit(m.Run())
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// exec runs a command inside the box with stdin, returning stdout and
// stderr apart (deadline 3 min).
func (b *box) exec(stdin string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := append([]string{"-t", strconv.Itoa(b.pid), "-m", "-p", "-u", "-i", "-n", "--",
		"env", "-u", "DOCKER_HOST", "-u", "NOTIFY_SOCKET", "-u", "LISTEN_FDS", "-u", "LISTEN_PID"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %s: %v: %s", b.name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

// sh runs a shell command line inside the box (combined output).
func (b *box) sh(line string) (string, error) {
	out, errs, err := b.exec("", "sh", "-c", line+" 2>&1")
	return out + errs, err
}

// cli runs the box's installed CLI.
func (b *box) cli(args ...string) (string, error) {
	out, _, err := b.exec("", append([]string{"/usr/bin/sandbox-host"}, args...)...)
	return out, err
}

// install writes content to path inside the box with install(1)'s options.
func (b *box) install(content, path string, opts ...string) error {
	_, _, err := b.exec(content, append(append([]string{"install"}, opts...), "/dev/stdin", path)...)
	return err
}

func setup() error {
	top = os.Getenv("FLEET_TOP")
	subnet := os.Getenv("FLEET_SUBNET")
	pids := strings.Fields(os.Getenv("FLEET_BOX_PIDS"))
	if top == "" || subnet == "" || len(pids) != 2 {
		return errors.New("FLEET_TOP, FLEET_SUBNET and FLEET_BOX_PIDS (two) must be set (test/e2e/fleet/run.sh)")
	}
	for i, p := range pids {
		pid, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("FLEET_BOX_PIDS: %q", p)
		}
		n := i + 1
		boxes = append(boxes, &box{n: n, name: fmt.Sprintf("box%d", n), pid: pid, addr: fmt.Sprintf("%s.%d", subnet, n),
			work: filepath.Join(top, fmt.Sprintf("box%d", n)), cred: fmt.Sprintf("sk-fleet-box%d-%s", n, randHex(12))})
	}
	step := time.Now()
	took := func(what string) {
		fmt.Printf("fleet e2e setup: %s took %.1f s\n", what, time.Since(step).Seconds())
		step = time.Now()
	}
	if err := makePKI(); err != nil {
		return err
	}
	took("the CA and certificates (openssl)")
	for _, b := range boxes {
		if err := b.prepare(); err != nil {
			return err
		}
	}
	took("the boxes' files, nkeys, credentials and fake models")
	for _, b := range boxes {
		if err := b.configure(); err != nil {
			return err
		}
	}
	took("sandbox.yaml, the host drop-in and fleet config on each box")
	// Both servers at once: a cluster's JetStream answers once its servers
	// have routed and elected a meta leader.
	if err := onEach(func(b *box) error {
		_, _, err := b.exec("", "systemctl", "enable", "--now", "sandbox-nats.service")
		return err
	}); err != nil {
		return err
	}
	took("systemctl enable --now sandbox-nats on both")
	if err := boxes[1].waitJetStream(2 * time.Minute); err != nil {
		return err
	}
	took("JetStream answering (doctor)")
	// box2's host first: it pulls its home partitions (the odd ones)
	// before box1's host is in the fleet, so they are surely box2's. box1
	// then pulls the even ones (had it come later than box2's presence
	// timeout and standby delay, box2 would stand by for them until box1
	// announced itself: the replies say who ran what).
	for _, b := range []*box{boxes[1], boxes[0]} {
		_, _, _ = b.exec("", "systemctl", "reset-failed", layout.HostService)
		if _, _, err := b.exec("", "systemctl", "restart", layout.HostService); err != nil {
			return fmt.Errorf("start the host in fleet mode: %w", err)
		}
		took(b.name + "'s host started in fleet mode")
	}
	return nil
}

func onEach(f func(*box) error) error {
	errs := make([]error, len(boxes))
	var wg sync.WaitGroup
	for i, b := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(b)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// makePKI makes the fleet's CA and each box's certificate with docs/fleet.md's
// openssl commands, in FLEET_TOP/pki (ca.key never enters a box).
func makePKI() error {
	dir := filepath.Join(top, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	script := "set -e\nopenssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1825 -subj /CN=sandbox-fleet-ca -keyout ca.key -out ca.pem\n"
	for _, b := range boxes {
		script += fmt.Sprintf("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=%[1]s -keyout %[1]s.key -out %[1]s.csr\n"+
			"openssl x509 -req -in %[1]s.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -out %[1]s.pem "+
			"-extfile <(printf 'subjectAltName=IP:%[2]s,IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth,clientAuth\\n')\n", b.name, b.addr)
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("openssl (docs/fleet.md's commands): %v\n%s", err, out)
	}
	return nil
}

// prepare installs the box's files as docs/fleet.md says, makes its
// nkey, its model credential and starts its fake model.
func (b *box) prepare() error {
	pki := filepath.Join(top, "pki")
	for _, c := range [][]string{
		{"install", "-m", "0644", filepath.Join(pki, "ca.pem"), fleetDir + "/ca.pem"},
		{"install", "-m", "0644", filepath.Join(pki, b.name+".pem"), fleetDir + "/box.pem"},
		{"install", "-m", "0640", "-g", "_sandbox", filepath.Join(pki, b.name+".key"), fleetDir + "/box.key"},
		{"sh", "-c", "openssl rand -hex 32 | install -m 0600 /dev/stdin " + fleetDir + "/jetstream.key"},
		{"mkdir", "-p", "-m", "0750", layout.CredentialsDir},
	} {
		if _, _, err := b.exec("", c...); err != nil {
			return err
		}
	}
	// As docs/operating.md says: the credential copier's group reads it.
	if err := b.install(b.cred+"\n", layout.CredentialsDir+"/model", "-m", "0640", "-o", "root", "-g", layout.CredsetUser); err != nil {
		return err
	}
	out, _, err := b.exec("", "/usr/bin/sandbox-host", "fleet", "nkey", "--output", fleetDir+"/box.nkey")
	if err != nil {
		return err
	}
	if b.nkey = strings.TrimSpace(out); !strings.HasPrefix(b.nkey, "U") {
		return fmt.Errorf("%s: sandbox-host fleet nkey printed %q, not a public user key", b.name, b.nkey)
	}
	return b.startModel()
}

// startModel starts the box's own fake model (a transient unit inside the
// box, on its loopback): every reply names the box, and on box2 a turn
// marked INFLIGHT is held (never answered there).
func (b *box) startModel() error {
	type reply = map[string]any
	var rules []map[string]any
	text := b.name + " answered: {{user}}"
	if b.n == 2 {
		rules = append(rules, map[string]any{"match": "INFLIGHT", "replies": []reply{{"text": text, "hold": "{{user}}"}}})
	}
	rules = append(rules, map[string]any{"match": "", "replies": []reply{{"text": text}}})
	script, _ := json.Marshal(map[string]any{"rules": rules})
	scriptPath := filepath.Join(b.work, "model-script.json")
	portFile := filepath.Join(b.work, "fakemodel.port")
	b.records = filepath.Join(b.work, "model-requests.jsonl")
	if err := os.WriteFile(scriptPath, script, 0o644); err != nil {
		return err
	}
	if _, _, err := b.exec("", "systemd-run", "--unit=e2e-fakemodel", "--collect", "--quiet", "--",
		filepath.Join(top, "bin", "fakemodel"), "-port-file", portFile, "-script", scriptPath, "-record", b.records); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(portFile); err == nil {
			b.modelPort, err = strconv.Atoi(strings.TrimSpace(string(data)))
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := b.sh("systemctl status e2e-fakemodel --no-pager; journalctl -u e2e-fakemodel --no-pager | tail")
	return fmt.Errorf("%s: the fake model wrote no port file in 30 s:\n%s", b.name, out)
}

// configure writes sandbox.yaml (fleet.* naming both boxes), installs the
// shipped drop-in for the host's network and checks `fleet config`.
func (b *box) configure() error {
	var routes, boxesYAML []string
	for _, o := range boxes {
		routes = append(routes, "tls://"+o.addr+":6222")
		boxesYAML = append(boxesYAML, fmt.Sprintf("      - {name: %s, nkey: %s}", o.name, o.nkey))
	}
	conf := fmt.Sprintf(`# written by the fleet e2e scenario (test/e2e/fleet)
model:
  url: http://127.0.0.1:%d/v1/chat/completions
  name: e2e-model
  maxTokens: 1024
  allowInsecureLoopbackHTTP: true
credentials:
  default: model
  rules: []
initialChannels: []
api:
  clients:
    uids: [0]
    groups: [sandbox-clients]
  admins:
    uids: [0]
    groups: []
turnDeadlineSeconds: 60
limits:
  memoryMb: 256
  cpus: 1
  pids: 64
  tmpfsMb: 16
standby:
  enabled: false
installation: e2e-fleet
logLevel: debug
fleet:
  enabled: true
  box: %s
  partitions: %d
  replicas: 1
  server:
    listen: 127.0.0.1:4222
    clusterListen: %s:6222
    routes: [%s]
    boxes:
%s
`, b.modelPort, b.name, partitions, b.addr, strings.Join(routes, ", "), strings.Join(boxesYAML, "\n"))
	if err := b.install(conf, layout.ConfigFile, "-m", "0640", "-o", "root", "-g", "_sandbox"); err != nil {
		return err
	}
	if _, _, err := b.exec("", "install", "-D", "-m", "0644", "/usr/share/roundtable-sandbox/sandbox-host-fleet.conf",
		"/etc/systemd/system/sandbox-host.service.d/fleet.conf"); err != nil {
		return err
	}
	if _, _, err := b.exec("", "systemctl", "daemon-reload"); err != nil {
		return err
	}
	out, err := b.cli("fleet", "config")
	if err != nil {
		return err
	}
	if !strings.Contains(out, b.addr+":6222") {
		return fmt.Errorf("%s: sandbox-host fleet config does not listen for routes on %s:6222:\n%s", b.name, b.addr, out)
	}
	return nil
}

// doctorReport is `sandbox-host --json doctor`.
type doctorReport struct {
	OK     bool `json:"ok"`
	Checks []struct {
		Name, Status, Detail, Remedy string
	} `json:"checks"`
}

func (b *box) doctor() (doctorReport, error) {
	var rep doctorReport
	out, _, err := b.exec("", "/usr/bin/sandbox-host", "--json", "doctor")
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
		return rep, fmt.Errorf("%s: doctor: %v (%v): %s", b.name, jerr, err, out)
	}
	return rep, nil
}

// waitJetStream waits until doctor says JetStream answers (the cluster
// has its meta leader).
func (b *box) waitJetStream(within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		rep, err := b.doctor()
		if err != nil {
			return err
		}
		for _, c := range rep.Checks {
			if c.Name == "fleet-jetstream" && c.Status == "ok" {
				return nil
			}
			if strings.HasPrefix(c.Name, "fleet") && c.Status != "ok" {
				last = c.Name + ": " + c.Detail
			}
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("%s: JetStream did not answer within %s (last: %s)", b.name, within, last)
}

// assertFleetHealthy checks every fleet line of doctor: this box's
// sandbox-nats, the host unit's network, the connection, JetStream, each
// family stream and bucket, the permissions.
func assertFleetHealthy(t *testing.T, b *box) {
	t.Helper()
	rep, err := b.doctor()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"fleet-server", "fleet-host-net", "fleet", "fleet-jetstream", "fleet-permissions"}
	for _, s := range fleetnats.StreamNames() {
		want = append(want, "stream "+s)
	}
	got := map[string]string{}
	for _, c := range rep.Checks {
		got[c.Name] = c.Status + ": " + c.Detail
		if c.Status == "fail" && !strings.HasPrefix(c.Name, "fleet") && !strings.HasPrefix(c.Name, "stream ") {
			t.Logf("%s: doctor (not the fleet's): %s %s: %s", b.name, c.Status, c.Name, c.Detail)
		}
	}
	for _, name := range want {
		switch st, ok := got[name]; {
		case !ok:
			t.Errorf("%s: doctor has no %q check", b.name, name)
		case !strings.HasPrefix(st, "ok: "):
			t.Errorf("%s: doctor %s: %s", b.name, name, st)
		default:
			t.Logf("%s: doctor %s: %s", b.name, name, st)
		}
	}
}

// turnResult is one turn submitted to a box's CLI.
type turnResult struct {
	channel, text string
	reply         struct {
		OK     bool   `json:"ok"`
		Text   string `json:"text"`
		TurnID string `json:"turnId"`
	}
	err  error
	took time.Duration
}

// ranOn is the box whose model answered the turn ("" when none did).
func (r turnResult) ranOn() string {
	for _, b := range boxes {
		if strings.HasPrefix(r.reply.Text, b.name+" answered: ") {
			return b.name
		}
	}
	return ""
}

// turn runs one turn through the box's CLI (host.sock).
func (b *box) turn(channel, text string) turnResult {
	r := turnResult{channel: channel, text: text}
	t0 := time.Now()
	out, _, err := b.exec("", "/usr/bin/sandbox-host", "--json", "--turn-timeout", "4m", "turn", channel,
		"--speaker-id", "guest-1", "--speaker-name", "Guest One", "--text", text)
	r.took = time.Since(t0)
	if err != nil {
		r.err = err
		return r
	}
	if err := json.Unmarshal([]byte(out), &r.reply); err != nil {
		r.err = fmt.Errorf("turn %s: %v: %s", channel, err, out)
	}
	return r
}

// turns runs one turn on each channel at once.
func (b *box) turns(channels []string, textOf func(string) string) []turnResult {
	out := make([]turnResult, len(channels))
	var wg sync.WaitGroup
	for i, ch := range channels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = b.turn(ch, textOf(ch))
		}()
	}
	wg.Wait()
	return out
}

// pickChannels names one channel on each partition: home1 on box1's
// (even), home2 on box2's (odd).
func pickChannels() (home1, home2 []string) {
	byPart := map[int]string{}
	for i := 0; len(byPart) < partitions; i++ {
		ch := fmt.Sprintf("fleet-e2e-%d", i)
		if p := fleet.Partition(ch, partitions); byPart[p] == "" {
			byPart[p] = ch
		}
	}
	for p := 0; p < partitions; p++ {
		if p%2 == 0 {
			home1 = append(home1, byPart[p])
		} else {
			home2 = append(home2, byPart[p])
		}
	}
	return home1, home2
}

// modelRecord is one request a box's fake model received.
type modelRecord struct {
	Header map[string][]string `json:"header"`
	Body   json.RawMessage     `json:"body"`
}

func records(b *box) []modelRecord {
	data, _ := os.ReadFile(b.records)
	var out []modelRecord
	for _, line := range bytes.Split(data, []byte("\n")) {
		var r modelRecord
		if len(bytes.TrimSpace(line)) > 0 && json.Unmarshal(line, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// diagnose prints both boxes' journals and containers when the test failed.
func diagnose(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, b := range boxes {
			out, _ := b.sh("journalctl --no-pager -o short-monotonic -u sandbox-host -u sandbox-nats -u 'sandbox-broker@*' | tail -150; docker ps -a; systemctl list-units --all --no-pager 'sandbox-*'")
			t.Logf("--- %s: journal (host, nats, brokers), containers, units ---\n%s", b.name, out)
		}
	})
}

// TestFleetTurnsAndFailover: turns on four channels submitted to box1 are
// answered, those of box2's partitions by box2 (its own model and
// credential, its own containers and broker units); doctor on each box
// reports the fleet healthy; box2's host is killed (SIGKILL, no restart)
// while it runs a turn, and that turn and then every channel answer from
// box1; after box2's host comes back its startup reap leaves nothing, and
// box1 has nothing left either.
func TestFleetTurnsAndFailover(t *testing.T) {
	diagnose(t)
	b1, b2 := boxes[0], boxes[1]
	home1, home2 := pickChannels()
	channels := append(append([]string{}, home1...), home2...)
	t.Logf("channels: %v on box1's partitions, %v on box2's (partition = SHA-256 of the key mod %d)", home1, home2, partitions)
	for _, ch := range channels {
		if out, err := b1.cli("channel", "on", ch); err != nil {
			t.Fatalf("sandbox-host channel on %s: %v\n%s", ch, err, out)
		}
	}

	for _, b := range boxes {
		assertFleetHealthy(t, b)
	}

	// 1. Turns on every channel, all submitted to box1.
	t0 := time.Now()
	owner := map[string]string{}
	for _, r := range b1.turns(channels, func(ch string) string { return "first turn on " + ch }) {
		switch {
		case r.err != nil:
			t.Errorf("turn on %s: %v", r.channel, r.err)
		case !r.reply.OK || !strings.Contains(r.reply.Text, r.text) || r.ranOn() == "":
			t.Errorf("turn on %s: reply %+v, want ok and \"<box> answered: ...%s\"", r.channel, r.reply, r.text)
		default:
			owner[r.channel] = r.ranOn()
			t.Logf("turn on %s (partition %d) ran on %s in %.1f s", r.channel, fleet.Partition(r.channel, partitions), r.ranOn(), r.took.Seconds())
		}
	}
	t.Logf("four turns at once: %.1f s", time.Since(t0).Seconds())
	if t.Failed() {
		t.FailNow()
	}
	for _, ch := range home2 {
		if owner[ch] != b2.name {
			t.Errorf("%s is on box2's partition %d, which box2 joined before box1's host started, but %s ran its turn", ch, fleet.Partition(ch, partitions), owner[ch])
		}
	}
	// What box2 ran, its own model saw, with box2's credential only (the
	// broker on box2 swapped it in; box1's never travels).
	var onBox2 []string
	for ch, o := range owner {
		if o == b2.name {
			onBox2 = append(onBox2, ch)
		}
	}
	recs := records(b2)
	for _, ch := range onBox2 {
		found := false
		for _, r := range recs {
			if bytes.Contains(r.Body, []byte("first turn on "+ch)) {
				found = true
				if got := strings.Join(r.Header["Authorization"], ","); got != "Bearer "+b2.cred {
					t.Errorf("box2's model saw %s's turn with Authorization %q, want box2's own credential", ch, got)
				}
			}
		}
		if !found {
			t.Errorf("box2 answered %s's turn, but box2's fake model has no request with its text", ch)
		}
	}
	for _, r := range recs {
		if strings.Contains(strings.Join(r.Header["Authorization"], ","), b1.cred) {
			t.Errorf("box1's credential reached box2's model")
		}
	}
	// ... through a broker unit of its own (the broker's journal line
	// names the channel).
	brokers, _, _ := b2.exec("", "journalctl", "--no-pager", "-o", "cat", "-u", "sandbox-broker@*")
	for _, ch := range onBox2 {
		found := false
		for _, l := range strings.Split(brokers, "\n") {
			found = found || strings.Contains(l, `msg="broker ready"`) && strings.Contains(l, " channel="+ids.ChannelTag(ch)+" ")
		}
		if !found {
			t.Errorf("box2 answered %s's turn, but no broker unit on box2 says it was ready for that channel", ch)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// 2. A turn in flight on box2 when its host dies: box1 stands by for
	// box2's partitions once box2 is unheard (pkg/fleet membership.go),
	// takes the turn again and answers it.
	victim := home2[0]
	inflight := make(chan turnResult, 1)
	go func() { inflight <- b1.turn(victim, "INFLIGHT turn on "+victim) }()
	// box2's fake model holds this turn: wait for its container on box2.
	tag := ids.ChannelTag(victim)
	if err := eventually(2*time.Minute, func() error {
		out, _, err := b2.exec("", "docker", "ps", "-q", "--filter", "label="+layout.LabelChannel+"="+tag, "--filter", "status=running")
		if err == nil && strings.TrimSpace(out) != "" {
			return nil
		}
		return fmt.Errorf("no running container of %s on box2 (%v)", victim, err)
	}); err != nil {
		t.Fatal(err)
	}
	// The fault: SIGKILL, and no restart (a runtime drop-in; the socket
	// stopped too, so that nothing activates the host again).
	if out, err := b2.sh("mkdir -p /run/systemd/system/sandbox-host.service.d && " +
		"printf '[Service]\\nRestart=no\\n' >/run/systemd/system/sandbox-host.service.d/e2e-no-restart.conf && systemctl daemon-reload"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	killed := time.Now()
	if out, err := b2.sh("systemctl kill --signal=SIGKILL " + layout.HostService + " && systemctl stop sandbox-host.socket"); err != nil {
		t.Fatalf("kill box2's host: %v: %s", err, out)
	}
	if err := eventually(time.Minute, func() error {
		if st, _, _ := b2.exec("", "systemctl", "is-active", layout.HostService); strings.TrimSpace(st) == "active" {
			return errors.New("box2's host still active after SIGKILL")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r := <-inflight
	switch {
	case r.err != nil:
		t.Fatalf("the turn in flight on box2 when its host died: %v", r.err)
	case !r.reply.OK || r.ranOn() != b1.name || !strings.Contains(r.reply.Text, r.text):
		t.Fatalf("the turn in flight on box2 when its host died: reply %+v, want box1's answer", r.reply)
	}
	t.Logf("the turn in flight on box2 was answered by box1 %.1f s after box2's host was killed", time.Since(killed).Seconds())
	if out, _ := b1.sh("journalctl --no-pager -o cat -u " + layout.HostService + " | grep 'stands by for a partition' || true"); out != "" {
		t.Logf("box1's journal:\n%s", out)
	}

	// 3. Every channel answers from box1 now.
	for _, r := range b1.turns(channels, func(ch string) string { return "after the kill, " + ch }) {
		switch {
		case r.err != nil:
			t.Errorf("turn on %s after box2's host died: %v", r.channel, r.err)
		case !r.reply.OK || r.ranOn() != b1.name || !strings.Contains(r.reply.Text, r.text):
			t.Errorf("turn on %s after box2's host died: reply %+v, want box1's answer", r.channel, r.reply)
		default:
			t.Logf("after the kill, %s (owned by %s before) answered by box1 in %.1f s", r.channel, owner[r.channel], r.took.Seconds())
		}
	}
	assertFleetHealthy(t, b1)

	// 4. Nothing left: box1 once its turns are cleaned up; box2 after its
	// host came back (its startup reap removes what the killed host left:
	// the held turn's container, broker unit and files).
	if out, err := b2.sh("rm /run/systemd/system/sandbox-host.service.d/e2e-no-restart.conf && systemctl daemon-reload && " +
		"systemctl reset-failed sandbox-host.service sandbox-host.socket; systemctl start sandbox-host.socket sandbox-host.service"); err != nil {
		t.Fatalf("bring box2's host back: %v: %s", err, out)
	}
	for _, b := range boxes {
		if err := eventually(time.Minute, b.leftovers); err != nil {
			t.Error(err)
		}
	}
}

// leftovers: none of the installation's containers, no broker unit, no
// turn directory or policy file (standbys are off).
func (b *box) leftovers() error {
	var left []string
	if out, _, err := b.exec("", "docker", "ps", "-aq", "--filter", "label="+layout.LabelInstallation); err != nil || strings.TrimSpace(out) != "" {
		left = append(left, fmt.Sprintf("containers %q (%v)", strings.Fields(out), err))
	}
	if out, _, _ := b.exec("", "systemctl", "list-units", "--all", "--no-legend", "--plain", "--no-pager", "sandbox-broker@*"); strings.TrimSpace(out) != "" {
		left = append(left, "broker units "+strings.TrimSpace(out))
	}
	for _, d := range []string{layout.RunRoot, layout.PolicyDir} {
		if out, _, _ := b.exec("", "ls", "-A", d); strings.TrimSpace(out) != "" {
			left = append(left, d+": "+strings.Join(strings.Fields(out), " "))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("%s: left: %s", b.name, strings.Join(left, "; "))
	}
	return nil
}

// eventually polls f (a state that persists once reached) until it
// returns nil or the time is up; it returns f's last error.
func eventually(within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}
