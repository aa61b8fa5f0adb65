package supervisor

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

func TestDefaultBrokerSocketIsTheContainersSocket(t *testing.T) {
	for _, want := range []string{protocol.BrokerSocketPath, protocol.BrokerDir + "/" + layout.BrokerSocketName} {
		if DefaultBrokerSocket != want {
			t.Errorf("DefaultBrokerSocket %q, want %q", DefaultBrokerSocket, want)
		}
	}
}

func TestModes(t *testing.T) {
	d := newDirs(t)
	if err := os.WriteFile(filepath.Join(d.workspace, "data.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command string
		argv    []string
		code    int
		stdout  string
		stderr  string // substring
	}{
		{"shell", "echo out; echo err >&2; exit 3", nil, 3, "out\n", "err"},
		{"argv, no shell interpretation", "", []string{"printf", "%s|", "a b", "$HOME", ";", "*"}, 0, "a b|$HOME|;|*|", ""},
		{"argv with a path", "", []string{"/bin/sh", "-c", "echo $0", "zero"}, 0, "zero\n", ""},
		{"argv not found", "", []string{"no-such-tool-4711"}, 127, "", "no-such-tool-4711: not found in PATH"},
		{"argv not executable", "", []string{"./data.txt"}, 126, "", "permission denied"},
		{"working directory", "pwd", nil, 0, d.workspace + "\n", ""},
		{"stdin is empty", "cat; echo eof", nil, 0, "eof\n", ""},
		// What the shell itself adds (PWD, SHLVL, _) is left out.
		{"environment", "env | grep -v -E '^(PWD|OLDPWD|SHLVL|_)=' | sort", nil, 0,
			"HOME=/tmp\nLANG=C.UTF-8\nLOGNAME=sandbox\nPATH=" + DefaultPATH + "\nUSER=sandbox\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := baseJob()
			j.Command, j.Argv = tt.command, tt.argv
			o := run(t, j, runConfig{d: d})
			if o.code != 0 || o.result.ExitCode != tt.code || o.result.Error != "" {
				t.Fatalf("supervisor exit %d, result %+v, want exit 0 and exit code %d (log: %s)", o.code, o.result, tt.code, o.log)
			}
			if got := o.out["stdout/main"]; got != tt.stdout {
				t.Errorf("stdout = %q, want %q", got, tt.stdout)
			}
			if got := o.out["stderr/main"]; !strings.Contains(got, tt.stderr) || (tt.stderr == "" && got != "") {
				t.Errorf("stderr = %q, want it to contain %q", got, tt.stderr)
			}
			if want := []wire.PhaseEnd{{Phase: wire.PhaseMain, ExitCode: tt.code}}; !reflect.DeepEqual(o.phases, want) {
				t.Errorf("phases = %+v, want %+v", o.phases, want)
			}
		})
	}
}

// statusFields returns the named fields of /proc/self/status lines in out.
func statusFields(out string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

const showIdentity = "id -u; id -g; id -G; grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs):' /proc/self/status"

func TestSetupAsRootThenMainAsUserWithoutCapabilities(t *testing.T) {
	requireRoot(t)
	d := newDirs(t)
	j := baseJob()
	j.Setup = []string{showIdentity, "env | sort >&2"}
	j.Command = showIdentity
	o := run(t, j, runConfig{d: d})
	if o.code != 0 || o.result != (wire.Result{}) {
		t.Fatalf("supervisor exit %d, result %+v (log: %s)", o.code, o.result, o.log)
	}
	setup, main := o.out["stdout/setup"], o.out["stdout/main"]
	if !strings.HasPrefix(setup, "0\n0\n0\n") {
		t.Errorf("setup identity = %q, want uid 0, gid 0, groups 0", setup)
	}
	if sf := statusFields(setup); sf["CapEff"] == "0000000000000000" || sf["CapBnd"] == "0000000000000000" {
		t.Errorf("setup ran without capabilities: %q", setup)
	}
	if !strings.HasPrefix(main, "65534\n65534\n65534\n") {
		t.Errorf("main identity = %q, want uid, gid and only group 65534", main)
	}
	mf := statusFields(main)
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if mf[k] != "0000000000000000" {
			t.Errorf("main %s = %q, want all zero", k, mf[k])
		}
	}
	if mf["NoNewPrivs"] != "1" || mf["Groups"] != "" || !strings.HasPrefix(mf["Uid"], "65534\t65534\t65534\t65534") {
		t.Errorf("main NoNewPrivs %q Groups %q Uid %q, want 1, none, 65534 x4", mf["NoNewPrivs"], mf["Groups"], mf["Uid"])
	}
	wantEnv := "DEBIAN_FRONTEND=noninteractive\nHOME=/root\nLANG=C.UTF-8\nLOGNAME=root\nPATH=" + DefaultPATH
	if !strings.HasPrefix(o.out["stderr/setup"], wantEnv) {
		t.Errorf("setup env = %q, want it to start with %q", o.out["stderr/setup"], wantEnv)
	}
	want := []wire.PhaseEnd{{Phase: wire.PhaseSetup, Index: 1}, {Phase: wire.PhaseSetup, Index: 2}, {Phase: wire.PhaseMain}}
	if !reflect.DeepEqual(o.phases, want) {
		t.Errorf("phases = %+v, want %+v", o.phases, want)
	}
}

func TestFailedSetupStopsTheRun(t *testing.T) {
	requireRoot(t)
	d := newDirs(t)
	j := baseJob()
	j.Setup = []string{"echo one", "echo two; exit 4", "echo three"}
	j.Command = "echo main; touch " + d.output + "/ran"
	j.Artifacts = []string{"ran"}
	o := run(t, j, runConfig{d: d})
	if o.code != 0 || o.result.ExitCode != 4 || o.result.FailedSetup != 2 {
		t.Fatalf("supervisor exit %d, result %+v, want failedSetup 2 exit 4 (log: %s)", o.code, o.result, o.log)
	}
	if o.out["stdout/setup"] != "one\ntwo\n" || o.out["stdout/main"] != "" {
		t.Errorf("output %q, want only setup's one and two", o.out)
	}
	if want := []wire.PhaseEnd{{Phase: wire.PhaseSetup, Index: 1}, {Phase: wire.PhaseSetup, Index: 2, ExitCode: 4}}; !reflect.DeepEqual(o.phases, want) {
		t.Errorf("phases = %+v, want %+v", o.phases, want)
	}
	if len(o.artifacts) != 0 {
		t.Errorf("artifacts %+v after a failed setup, want none", o.artifacts)
	}
	if _, err := os.Stat(filepath.Join(d.output, "ran")); err == nil {
		t.Error("the main command ran after a failed setup")
	}
}

// A process a setup command leaves behind is killed before the next
// command: no root process lives into the main phase.
func TestSetupStragglersDoNotReachMain(t *testing.T) {
	requireRoot(t)
	d := newDirs(t)
	j := baseJob()
	j.Setup = []string{"setsid sleep 30 >/dev/null 2>&1 & echo started"}
	// The setup's leftover was killed as the main command's uid too (see
	// killAs), which must leave no thread of the supervisor with that
	// uid: kill -0 would then reach it.
	j.Command = "n=0; for f in /proc/[0-9]*/status; do grep -q '^Uid:\t0\t' $f 2>/dev/null && n=$((n+1)); done; echo root=$n\n" +
		"for t in /proc/1/task/*; do kill -0 ${t##*/} 2>/dev/null && echo signalled ${t##*/}; done"
	o := run(t, j, runConfig{d: d})
	// The supervisor itself is the one root process left, out of reach.
	if o.out["stdout/setup"] != "started\n" || o.out["stdout/main"] != "root=1\n" {
		t.Fatalf("output %q, want started and root=1, no thread signalled (log: %s)", o.out, o.log)
	}
}

func TestExitCodesAndSignals(t *testing.T) {
	d := newDirs(t)
	for _, tt := range []struct {
		command string
		code    int
	}{
		{"exit 0", 0}, {"exit 1", 1}, {"exit 255", 255},
		{"kill -TERM $$", 128 + 15}, {"kill -KILL $$", 128 + 9}, {"kill -SEGV $$", 128 + 11},
	} {
		t.Run(tt.command, func(t *testing.T) {
			j := baseJob()
			j.Command = tt.command
			o := run(t, j, runConfig{d: d})
			if o.code != 0 || o.result.ExitCode != tt.code || len(o.phases) != 1 || o.phases[0].ExitCode != tt.code {
				t.Fatalf("supervisor exit %d, result %+v, phases %+v, want exit code %d (log: %s)", o.code, o.result, o.phases, tt.code, o.log)
			}
		})
	}
}

func TestOutputBoundTruncatesAndKeepsDraining(t *testing.T) {
	d := newDirs(t)
	j := baseJob()
	j.MaxOutputBytes = 1000
	// 3 MB through the pipe: the child blocks forever unless the
	// supervisor keeps reading past the bound; "done" proves it did not.
	j.Command = "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2"
	o := run(t, j, runConfig{d: d})
	if o.code != 0 || o.result.ExitCode != 0 {
		t.Fatalf("supervisor exit %d, result %+v (log: %s)", o.code, o.result, o.log)
	}
	if got := o.out["stdout/main"]; got != strings.Repeat("a", 1000) {
		t.Errorf("stdout: %d bytes, want exactly 1000 a", len(got))
	}
	if o.out["stderr/main"] != "done\n" {
		t.Errorf("stderr = %q, want done", o.out["stderr/main"])
	}
	if !o.result.StdoutTruncated || o.result.StderrTruncated || o.result.StdoutDropped != 3000000-1000 || o.result.StderrDropped != 0 {
		t.Errorf("truncation %+v, want stdout only, %d bytes dropped", o.result, 3000000-1000)
	}
}

func TestOutputBoundCountsSetupAndMainTogether(t *testing.T) {
	requireRoot(t)
	d := newDirs(t)
	j := baseJob()
	j.MaxOutputBytes = 10
	j.Setup = []string{"printf 1234567"}
	j.Command = "printf abcdef"
	o := run(t, j, runConfig{d: d})
	if o.out["stdout/setup"] != "1234567" || o.out["stdout/main"] != "abc" || !o.result.StdoutTruncated || o.result.StdoutDropped != 3 {
		t.Fatalf("output %q, result %+v, want 7 setup bytes, 3 main bytes, truncated", o.out, o.result)
	}
}

func TestOutputStreamsAsItComes(t *testing.T) {
	d := newDirs(t)
	j := baseJob()
	j.Command = "echo first; sleep 2; echo second"
	o := run(t, j, runConfig{d: d})
	if o.out["stdout/main"] != "first\nsecond\n" {
		t.Fatalf("stdout = %q", o.out["stdout/main"])
	}
	if o.firstOut > o.elapsed-time.Second {
		t.Errorf("first output after %v of %v: not streamed", o.firstOut, o.elapsed)
	}
}

// The straggler leaves the process group (setsid) and waits to overwrite
// the artifact; the supervisor must have killed it before collection: the
// hook finds no other process, waits a second, and the artifact is intact.
func TestStragglerKilledBeforeCollection(t *testing.T) {
	requireRoot(t)
	d := newDirs(t)
	hook := filepath.Join(d.base, "afterkill")
	j := baseJob()
	j.Command = "setsid sh -c 'trap \"\" TERM HUP; sleep 0.3; echo late > " + d.output + "/victim' >/dev/null 2>&1 & echo early > " + d.output + "/victim"
	j.Artifacts = []string{"victim"}
	o := run(t, j, runConfig{d: d, afterKill: hook})
	if o.code != 0 || o.result.ExitCode != 0 {
		t.Fatalf("supervisor exit %d, result %+v (log: %s)", o.code, o.result, o.log)
	}
	if b, _ := os.ReadFile(hook); string(b) != "alone" {
		t.Errorf("after the kill the supervisor was %q, want alone", b)
	}
	if got := string(o.data["victim"]); got != "early\n" {
		t.Errorf("artifact = %q, want early (a straggler survived)", got)
	}
}

// As in a container with setup: root without CAP_KILL (and without most
// other capabilities), under no_new_privs. A setup command holds only
// SetupCommandCapabilities and cannot switch users; the bounding set still
// empties for main, and leftovers (setup's as root, the main user's) are
// still all killed before the next command and before collection.
func TestSetupWithTheContainersCapabilities(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	d := newDirs(t)
	hook := filepath.Join(d.base, "afterkill")
	j := baseJob()
	j.Setup = []string{
		"grep -E '^Cap(Eff|Bnd):' /proc/self/status",
		"setpriv --reuid=12345 --regid=12345 --clear-groups true 2>/dev/null && echo switched || echo cannot-switch",
		"setsid sleep 30 >/dev/null 2>&1 & echo started",
	}
	j.Command = "setsid sh -c 'sleep 0.3; echo late > " + d.output + "/victim' >/dev/null 2>&1 & echo early > " + d.output + `/victim
n=0; for f in /proc/[0-9]*/status; do grep -q '^Uid:	12345' $f 2>/dev/null && n=$((n+1)); done; echo other=$n
grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status`
	j.Artifacts = []string{"victim"}
	o := run(t, j, runConfig{d: d, afterKill: hook, containerCaps: true})
	if o.code != 0 || o.result != (wire.Result{}) {
		t.Fatalf("supervisor exit %d, result %+v, stderr %q (log: %s)", o.code, o.result, o.out, o.log)
	}
	if want := "CapEff:\t" + setupCommandCapsMask + "\nCapBnd:\t" + setupCommandCapsMask + "\ncannot-switch\nstarted\n"; o.out["stdout/setup"] != want {
		t.Errorf("setup output %q, want %q (chown, fowner, fsetid only)", o.out["stdout/setup"], want)
	}
	want := "other=0\n"
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		want += k + ":\t0000000000000000\n"
	}
	if o.out["stdout/main"] != want {
		t.Errorf("main output %q, want %q", o.out["stdout/main"], want)
	}
	if b, _ := os.ReadFile(hook); string(b) != "alone" {
		t.Errorf("after the kill the supervisor was %q, want alone", b)
	}
	if got := string(o.data["victim"]); got != "early\n" {
		t.Errorf("artifact = %q, want early (a straggler survived)", got)
	}
}

// Orphans reparent to the supervisor (PID 1) and must not stay zombies; the
// main command's status is not lost to the reaping.
func TestZombiesAreReapedAndMainStatusKept(t *testing.T) {
	requireRoot(t)
	d := newDirs(t)
	j := baseJob()
	j.Command = `for i in $(seq 30); do sh -c 'sleep 0.05 & exit 0'; sh -c 'true & exit 0'; done; sleep 1
z=0; for f in /proc/[0-9]*/stat; do s=$(cut -d' ' -f3 "$f" 2>/dev/null); [ "$s" = Z ] && z=$((z+1)); done
echo zombies=$z; exit 7`
	for i := 0; i < 3; i++ {
		o := run(t, j, runConfig{d: d})
		if o.code != 0 || o.result.ExitCode != 7 {
			t.Fatalf("supervisor exit %d, result %+v, want exit code 7 (log: %s)", o.code, o.result, o.log)
		}
		if o.out["stdout/main"] != "zombies=0\n" {
			t.Fatalf("stdout = %q, want zombies=0", o.out["stdout/main"])
		}
	}
}

func TestArtifactsHostile(t *testing.T) {
	d := newDirs(t)
	const max = 1 << 20
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	out := func(p string) string { return filepath.Join(d.output, p) }
	must(os.Symlink("/etc/passwd", out("passwd-link")))
	must(os.Mkdir(out("real"), 0o755))
	must(os.WriteFile(out("real/f"), []byte("hello"), 0o644))
	must(os.Symlink("real", out("linkdir")))
	must(os.Symlink("/etc", out("etc")))
	must(unix.Mkfifo(out("fifo"), 0o666))
	must(os.Mkdir(out("adir"), 0o755))
	must(os.WriteFile(out("afile"), []byte("x"), 0o644))
	must(os.Mkdir(out("many"), 0o755))
	for i := 0; i < 10000; i++ {
		must(os.WriteFile(out(fmt.Sprintf("many/f%05d", i)), []byte(fmt.Sprint(i)), 0o644))
	}
	sparse, err := os.Create(out("sparse"))
	must(err)
	must(sparse.Truncate(1 << 40)) // 1 TiB, nothing allocated
	must(sparse.Close())
	must(os.WriteFile(out("exact"), bytes.Repeat([]byte("e"), max), 0o644))
	must(os.WriteFile(out("small"), []byte("small!"), 0o644))
	want := map[string]string{
		"passwd-link": wire.ArtifactNotRegular, "linkdir/f": wire.ArtifactNotRegular, "etc/passwd": wire.ArtifactNotRegular,
		"fifo": wire.ArtifactNotRegular, "adir": wire.ArtifactNotRegular, "afile/x": wire.ArtifactMissing,
		"missing": wire.ArtifactMissing, "missing-dir/x": wire.ArtifactMissing, "sparse": wire.ArtifactOverSize,
		"real/f": "", "many/f05000": "", "exact": "", "small": wire.ArtifactOverTotal,
	}
	order := []string{"passwd-link", "linkdir/f", "etc/passwd", "fifo", "adir", "afile/x", "missing", "missing-dir/x",
		"sparse", "real/f", "many/f05000", "exact", "small"}
	if isRoot() {
		must(unix.Mknod(out("dev"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		want["dev"] = wire.ArtifactNotRegular
		order = append(order, "dev")
	} else {
		t.Log("not root: the device node case is skipped")
	}
	j := baseJob()
	j.Command = "true"
	j.Artifacts = order
	j.MaxArtifactBytes = max
	j.MaxArtifactTotalBytes = max + 5 + 4 + 5 // real/f + many/f05000 + exact + 5: small (6) is over
	o := run(t, j, runConfig{d: d})
	if o.code != 0 || o.result.ExitCode != 0 {
		t.Fatalf("supervisor exit %d, result %+v (log: %s)", o.code, o.result, o.log)
	}
	var got []string
	for _, a := range o.artifacts {
		got = append(got, a.Path)
		if a.Error != want[a.Path] {
			t.Errorf("%s: error %q, want %q", a.Path, a.Error, want[a.Path])
		}
	}
	if !reflect.DeepEqual(got, order) {
		t.Fatalf("artifacts %q, want %q", got, order)
	}
	for p, data := range map[string]string{"real/f": "hello", "many/f05000": "5000", "exact": strings.Repeat("e", max)} {
		if string(o.data[p]) != data {
			t.Errorf("%s: %d bytes, want %d", p, len(o.data[p]), len(data))
		}
	}
	if o.elapsed > 20*time.Second {
		t.Errorf("run took %v: a fifo blocked or the walk listed directories", o.elapsed)
	}
}

// A file that changes size between the stat and the read is refused (the
// real supervisor kills every writer first; this drives readArtifact
// directly with a file that grows after the size was taken).
func TestReadArtifactRefusesAChangedFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	if h, data := readArtifact(root, "f", 10, 10); h.Error != "" || string(data) != "abc" {
		t.Fatalf("unchanged file: %+v %q", h, data)
	}
	// A FUSE-free way to make a file "grow" during the read: /proc files
	// report size 0 and read non-empty.
	proc, err := unix.Open("/proc/self", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(proc)
	if h, _ := readArtifact(proc, "status", 1<<20, 1<<20); h.Error != wire.ArtifactChanged {
		t.Fatalf("/proc/self/status (size 0, content not): %+v, want %q", h, wire.ArtifactChanged)
	}
}

func TestProxyBridgeReachesTheBrokerSocket(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	d := newDirs(t)
	sock := filepath.Join(d.base, "broker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lines := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nbrokered"))
	}()
	j := baseJob()
	j.Proxy = true
	j.Command = `echo "$HTTP_PROXY $HTTPS_PROXY $http_proxy $https_proxy"; curl -s --max-time 10 http://example.test/x`
	o := run(t, j, runConfig{d: d, broker: sock})
	if o.code != 0 || o.result.ExitCode != 0 {
		t.Fatalf("supervisor exit %d, result %+v, stderr %q (log: %s)", o.code, o.result, o.out["stderr/main"], o.log)
	}
	first, body, _ := strings.Cut(o.out["stdout/main"], "\n")
	urls := strings.Fields(first)
	if len(urls) != 4 || !strings.HasPrefix(urls[0], "http://127.0.0.1:") || urls[1] != urls[0] || urls[2] != urls[0] || urls[3] != urls[0] {
		t.Errorf("proxy variables %q, want four equal http://127.0.0.1:port", first)
	}
	if body != "brokered" {
		t.Errorf("curl got %q, want the broker's answer", body)
	}
	select {
	case l := <-lines:
		if l != "GET http://example.test/x HTTP/1.1" {
			t.Errorf("broker saw %q", l)
		}
	default:
		t.Error("the broker socket saw no connection")
	}
}

func TestInvalidJobIsRefused(t *testing.T) {
	d := newDirs(t)
	for name, in := range map[string]string{
		"garbage":   "hello\n",
		"uid 0":     `{"command":"id","uid":0,"gid":0,"maxOutputBytes":1,"maxArtifactBytes":1,"maxArtifactTotalBytes":1}` + "\n",
		"no stdin":  "",
		"two modes": `{"command":"id","argv":["id"],"uid":1,"gid":1,"maxOutputBytes":1,"maxArtifactBytes":1,"maxArtifactTotalBytes":1}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			j := baseJob()
			j.Command = "true"
			o := run(t, j, runConfig{d: d, stdin: []byte(in)})
			if o.code != 2 || o.result != (wire.Result{ExitCode: -1, Error: errInvalidJob}) || len(o.phases) != 0 {
				t.Fatalf("supervisor exit %d, result %+v, phases %+v; want 2, invalid job, nothing run", o.code, o.result, o.phases)
			}
		})
	}
}

// A supervisor that is not root (a run without setup: the container runs as
// the user) runs only jobs for its own uid:gid and refuses setup.
func TestNonRootSupervisor(t *testing.T) {
	requireRoot(t) // to start the supervisor as another user
	d := newDirs(t)
	as := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	j := baseJob()
	j.Command = "id -u; id -g"
	o := run(t, j, runConfig{d: d, asUser: as})
	if o.code != 0 || o.result.ExitCode != 0 || o.out["stdout/main"] != "65534\n65534\n" {
		t.Fatalf("own user: exit %d, result %+v, output %q (log: %s)", o.code, o.result, o.out, o.log)
	}
	j.Setup = []string{"true"}
	if o := run(t, j, runConfig{d: d, asUser: as}); o.code != 2 || o.result.Error != errNeedsRoot || len(o.phases) != 0 {
		t.Errorf("setup as non-root: exit %d, result %+v, phases %+v, want %q and nothing run", o.code, o.result, o.phases, errNeedsRoot)
	}
	j.Setup = nil
	j.UID = 4242
	if o := run(t, j, runConfig{d: d, asUser: as}); o.code != 2 || o.result.Error != errWrongUser || len(o.phases) != 0 {
		t.Errorf("other user as non-root: exit %d, result %+v, want %q", o.code, o.result, errWrongUser)
	}
}

// A signal to the supervisor (docker stop) kills the command and still
// ends the stream with a result.
func TestSignalStopsTheRun(t *testing.T) {
	d := newDirs(t)
	j := baseJob()
	j.Command = "echo started; sleep 30"
	o := run(t, j, runConfig{d: d, signalAt: 500 * time.Millisecond})
	if o.code != 2 || o.result.Error != errStopped || o.out["stdout/main"] != "started\n" {
		t.Fatalf("exit %d, result %+v, output %q, want stopped (log: %s)", o.code, o.result, o.out, o.log)
	}
	if o.elapsed > 10*time.Second {
		t.Errorf("took %v to stop", o.elapsed)
	}
}

// The reaper hands a started child's status to its waiter even when the
// child exits before start returns (start holds the reaping lock).
func TestReaperNeverLosesAStartedChild(t *testing.T) {
	r := newReaper()
	defer r.close()
	var codes []int
	for i := 0; i < 50; i++ {
		pid, ch, err := r.start(func() (int, error) {
			return syscall.ForkExec("/bin/sh", []string{"sh", "-c", "exit " + itoa(i%5)}, &syscall.ProcAttr{})
		})
		if err != nil || pid <= 0 {
			t.Fatal(err)
		}
		select {
		case ws := <-ch:
			codes = append(codes, exitCode(ws))
		case <-time.After(10 * time.Second):
			t.Fatalf("child %d: no status", i)
		}
	}
	sort.Ints(codes)
	if codes[0] != 0 || codes[len(codes)-1] != 4 || len(codes) != 50 {
		t.Fatalf("codes %v", codes)
	}
}

// A setup command (root) reaches no file of the project, not even one the
// main command may read, whatever it tries: read through the gate, list
// it, change its mode or owner, switch to the gate's group or owner, go
// through /proc; the project appears at the workspace only for the main
// command, which reads what its uid may read and nothing more. With the
// full root set of a test (SYS_ADMIN included) and with a container's.
func TestSetupCannotReachTheProject(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	for _, caps := range []bool{false, true} {
		t.Run(fmt.Sprintf("container caps %v", caps), func(t *testing.T) {
			d := newDirs(t)
			for name, mode := range map[string]os.FileMode{"secret": 0o600, "open": 0o644} {
				p := filepath.Join(d.project, name)
				if err := os.WriteFile(p, []byte(name+"-content\n"), mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, mode); err != nil {
					t.Fatal(err)
				}
			}
			j := baseJob()
			tries := []string{
				"cat " + d.project + "/secret", "cat " + d.project + "/open", "ls " + d.gate,
				"cat " + d.workspace + "/open", "cat /proc/1/cwd/" + d.project + "/open",
				"chmod 0777 " + d.gate, "chown 0:0 " + d.gate,
				"setpriv --regid=" + itoa(j.GID) + " --clear-groups cat " + d.project + "/open",
				"setpriv --reuid=" + itoa(j.UID) + " cat " + d.project + "/open",
			}
			var setup string
			for _, c := range tries {
				setup += c + " && echo REACHED; "
			}
			j.Setup = []string{setup + "echo tried; touch left-by-setup"}
			j.Command = "cat open; cat secret || echo no-secret; ls"
			o := run(t, j, runConfig{d: d, containerCaps: caps})
			if o.code != 0 || o.result != (wire.Result{}) {
				t.Fatalf("supervisor exit %d, result %+v, output %q (log: %s)", o.code, o.result, o.out, o.log)
			}
			if got := o.out["stdout/setup"]; got != "tried\n" {
				t.Errorf("setup stdout %q, want only tried", got)
			}
			if strings.Contains(o.out["stdout/setup"]+o.out["stderr/setup"], "-content") {
				t.Errorf("setup read a project file: %q", o.out)
			}
			if got, want := o.out["stdout/main"], "open-content\nno-secret\nopen\nsecret\n"; got != want {
				t.Errorf("main stdout %q, want %q", got, want)
			}
		})
	}
}

// Setup runs only when the project is behind a gate it cannot pass; any
// other layout fails the run before a setup command starts.
func TestSetupNeedsTheGate(t *testing.T) {
	requireRoot(t)
	for _, tt := range []struct {
		name   string
		change func(d dirs) error
		rw     bool
	}{
		{"others may enter", func(d dirs) error { return os.Chmod(d.gate, 0o701) }, false},
		{"the group may enter", func(d dirs) error { return os.Chmod(d.gate, 0o710) }, false},
		{"the owner cannot pass", func(d dirs) error { return os.Chmod(d.gate, 0o600) }, false},
		{"owned by root", func(d dirs) error { return os.Chown(d.gate, 0, 65534) }, false},
		{"root's group", func(d dirs) error { return os.Chown(d.gate, 65534, 0) }, false},
		{"not the job's user", func(d dirs) error { return os.Chown(d.gate, 4444, 65534) }, false},
		{"no project inside", func(d dirs) error { return os.Remove(d.project) }, false},
		{"writable", func(d dirs) error { return nil }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirs(t)
			if err := tt.change(d); err != nil {
				t.Fatal(err)
			}
			j := baseJob()
			j.Setup = []string{"echo setup-ran"}
			j.Command = "echo main-ran"
			o := run(t, j, runConfig{d: d, gateWritable: tt.rw})
			if o.result.Error != errGate || len(o.out) != 0 || len(o.phases) != 0 {
				t.Errorf("result %+v, output %q, phases %v; want %q and nothing run (log: %s)", o.result, o.out, o.phases, errGate, o.log)
			}
		})
	}
}
