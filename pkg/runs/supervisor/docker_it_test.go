package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
)

// The supervisor as PID 1 of a real run container (pkg/container's run spec:
// CapDrop ALL, the setup capabilities with setup, no-new-privileges, network
// none, read-only workspace, /output tmpfs) from the small test toolbox with
// this tree's sandbox-worker. make integration sets both switches.
func TestIntegrationSupervisorInARunContainer(t *testing.T) {
	host, base := os.Getenv("SANDBOX_IT_DOCKER"), os.Getenv("SANDBOX_IT_TOOLBOX_TAR")
	if host == "" || base == "" {
		t.Skip("integration test skipped: set SANDBOX_IT_DOCKER and SANDBOX_IT_TOOLBOX_TAR (make integration does)")
	}
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sandbox-worker")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/roundtable-sandbox/sandbox/cmd/sandbox-worker")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build sandbox-worker: %v: %s", err, out)
	}
	w, err := toolbox.ReadWorker(bin)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := toolbox.Connect(host)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	tag := fmt.Sprintf("roundtable-sandbox-supervisor-it:%d", time.Now().UnixNano())
	if _, err := toolbox.Import(ctx, cli, toolbox.ImportOptions{BaseTar: base, Worker: w, Tag: tag}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	d, err := container.New(host)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	const uid = 4242
	t.Run("setup then main", func(t *testing.T) {
		j := wire.Job{
			Setup: []string{
				"id -u; grep -E '^Cap(Eff|Bnd):' /proc/self/status",
				"setsid sleep 30 >/dev/null 2>&1 & echo bg",
			},
			Command: showIdentity + `
setsid sh -c 'sleep 0.5; echo late > /output/report.txt' >/dev/null 2>&1 &
echo early > /output/report.txt; ln -s /etc/passwd /output/link; mkfifo /output/fifo`,
			UID: uid, GID: uid, Artifacts: []string{"report.txt", "link", "fifo", "missing"},
			MaxOutputBytes: 1 << 20, MaxArtifactBytes: 1 << 20, MaxArtifactTotalBytes: 1 << 20,
		}
		o := runInContainer(t, ctx, d, tag, j, nil)
		if o.result != (wire.Result{}) {
			t.Fatalf("result %+v, output %q", o.result, o.out)
		}
		if want := "0\nCapEff:\t" + setupCommandCapsMask + "\nCapBnd:\t" + setupCommandCapsMask + "\nbg\n"; o.out["stdout/setup"] != want {
			t.Errorf("setup output %q, want %q", o.out["stdout/setup"], want)
		}
		main := o.out["stdout/main"]
		if !strings.HasPrefix(main, "4242\n4242\n4242\n") {
			t.Errorf("main identity %q, want 4242 and no other group", main)
		}
		mf := statusFields(main)
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if mf[k] != "0000000000000000" {
				t.Errorf("main %s = %q, want all zero", k, mf[k])
			}
		}
		if mf["NoNewPrivs"] != "1" || mf["Groups"] != "" {
			t.Errorf("main NoNewPrivs %q Groups %q", mf["NoNewPrivs"], mf["Groups"])
		}
		want := map[string]string{"report.txt": "", "link": wire.ArtifactNotRegular, "fifo": wire.ArtifactNotRegular, "missing": wire.ArtifactMissing}
		for _, a := range o.artifacts {
			if a.Error != want[a.Path] {
				t.Errorf("artifact %s: error %q, want %q", a.Path, a.Error, want[a.Path])
			}
		}
		if len(o.artifacts) != 4 || string(o.data["report.txt"]) != "early\n" {
			t.Errorf("artifacts %+v, report %q; want 4 and early", o.artifacts, o.data["report.txt"])
		}
	})
	// Setup (root) reaches no project file, not even one the main command
	// may read: the project is behind its gate until setup ended.
	t.Run("setup cannot read the project", func(t *testing.T) {
		files := map[string]os.FileMode{"secret": 0o600, "open": 0o644}
		tries := []string{
			"cat " + wire.SetupProjectPath + "/secret", "cat " + wire.SetupProjectPath + "/open", "ls " + wire.SetupGatePath,
			"cat /workspace/open", "cat /proc/1/root" + wire.SetupProjectPath + "/open",
			"chmod 0777 " + wire.SetupGatePath, "chown 0:0 " + wire.SetupGatePath,
			"setpriv --regid=" + strconv.Itoa(uid) + " --clear-groups cat " + wire.SetupProjectPath + "/open",
			"setpriv --reuid=" + strconv.Itoa(uid) + " cat " + wire.SetupProjectPath + "/open",
		}
		var setup string
		for _, c := range tries {
			setup += c + " && echo REACHED; "
		}
		j := wire.Job{
			Setup:   []string{setup + "echo tried"},
			Command: "cat /workspace/open; cat /workspace/secret || echo no-secret",
			UID:     uid, GID: uid, MaxOutputBytes: 1 << 20, MaxArtifactBytes: 1, MaxArtifactTotalBytes: 1,
		}
		o := runInContainer(t, ctx, d, tag, j, files)
		if o.result != (wire.Result{}) {
			t.Fatalf("result %+v, output %q", o.result, o.out)
		}
		if o.out["stdout/setup"] != "tried\n" || strings.Contains(o.out["stdout/setup"]+o.out["stderr/setup"], "-content") {
			t.Errorf("setup reached the project: %q", o.out)
		}
		if got := o.out["stdout/main"]; got != "open-content\nno-secret\n" {
			t.Errorf("main output %q, want open's content and no secret", got)
		}
	})
	// Package installation works with setup's capabilities (chown,
	// fowner, fsetid; no DAC_OVERRIDE, SETUID or SETGID): dpkg gives a
	// directory to another user and sets its mode after (FOWNER), a
	// setgid bit for a group root is not in (FSETID) and a setuid bit;
	// apt installs without dropping to _apt (the toolbox's AptConfPath).
	// Offline: the package is built in setup.
	t.Run("setup installs a package", func(t *testing.T) {
		j := wire.Job{
			Setup: []string{`set -e
mkdir -p /tmp/p/DEBIAN /tmp/p/usr/local/bin /tmp/p/var/lib/probe
printf 'Package: sandbox-it-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: it <it@example.org>\nDescription: probe\n' > /tmp/p/DEBIAN/control
printf '#!/bin/sh\necho probe-ran\n' > /tmp/p/usr/local/bin/probe
cp /tmp/p/usr/local/bin/probe /tmp/p/usr/local/bin/probe-suid
chown 0:1234 /tmp/p/usr/local/bin/probe
chmod 2755 /tmp/p/usr/local/bin/probe
chmod 4755 /tmp/p/usr/local/bin/probe-suid
chown 1234:1234 /tmp/p/var/lib/probe
chmod 0755 /tmp/p/var/lib/probe
dpkg-deb --build /tmp/p /tmp/probe.deb >/dev/null`, "apt-get install -y /tmp/probe.deb >/dev/null 2>&1 || apt-get install -y /tmp/probe.deb"},
			Command: "dpkg-query -W -f='${Status}\\n' sandbox-it-probe; stat -c '%u:%g %a' /usr/local/bin/probe /usr/local/bin/probe-suid /var/lib/probe; probe",
			UID:     uid, GID: uid, MaxOutputBytes: 1 << 20, MaxArtifactBytes: 1, MaxArtifactTotalBytes: 1,
		}
		o := runInContainer(t, ctx, d, tag, j, nil)
		if o.result != (wire.Result{}) {
			t.Fatalf("result %+v, output %q", o.result, o.out)
		}
		if want := "install ok installed\n0:1234 2755\n0:0 4755\n1234:1234 755\nprobe-ran\n"; o.out["stdout/main"] != want {
			t.Errorf("main output %q, want %q (output %q)", o.out["stdout/main"], want, o.out)
		}
	})
	t.Run("no setup", func(t *testing.T) {
		j := wire.Job{
			Command: "id -u; touch /workspace/x || echo read-only; grep -E '^CapBnd:' /proc/self/status; exit 3",
			UID:     uid, GID: uid, MaxOutputBytes: 1 << 20, MaxArtifactBytes: 1, MaxArtifactTotalBytes: 1,
		}
		o := runInContainer(t, ctx, d, tag, j, nil)
		if o.result != (wire.Result{ExitCode: 3}) || o.out["stdout/main"] != "4242\nread-only\nCapBnd:\t0000000000000000\n" {
			t.Fatalf("result %+v, output %q", o.result, o.out)
		}
	})
}

// runInContainer runs j in a fresh run container and decodes the stream.
// files are the project's (root's, "<name>-content\n", of their modes);
// a job with setup gets the project's gate as the host makes it (the job's
// uid:gid, 0700).
func runInContainer(t *testing.T, ctx context.Context, d *container.Driver, img string, j wire.Job, files map[string]os.FileMode) outcome {
	t.Helper()
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	ws, _ = filepath.EvalSymlinks(ws)
	for name, mode := range files {
		p := filepath.Join(ws, name)
		if err := os.WriteFile(p, []byte(name+"-content\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	gate := ""
	if len(j.Setup) > 0 {
		gate, _ = filepath.EvalSymlinks(t.TempDir())
		if err := os.Mkdir(filepath.Join(gate, "workspace"), 0o500); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(gate, j.UID, j.GID); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(gate, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	turn := ids.NewTurnID()
	channel := "run-it:" + t.Name()
	name, err := ids.ContainerName(channel, turn)
	if err != nil {
		t.Fatal(err)
	}
	spec := container.Spec{
		Name: name, Image: img, UID: j.UID, GID: j.GID, WorkspaceDir: ws,
		MemoryMB: 256, CPUs: 1, Pids: 64, TmpfsMB: 16, LogTag: ids.LogTag(channel),
		Labels: map[string]string{
			layout.LabelInstallation: "supervisor-it",
			layout.LabelTurn:         turn,
			layout.LabelChannel:      ids.ChannelTag(channel),
			layout.LabelDeadline:     strconv.FormatInt(time.Now().Add(5*time.Minute).Unix(), 10),
		},
		Run: &container.RunOptions{Setup: len(j.Setup) > 0, GateDir: gate, OutputMB: 16, Command: []string{layout.ToolboxWorker, "run-supervise"}},
	}
	if rt := os.Getenv("SANDBOX_IT_RUNTIME"); rt != "" {
		spec.Runtime = rt
	}
	id, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Remove(context.Background(), name); err != nil {
			t.Errorf("remove %s: %v", name, err)
		}
	})
	var stdin bytes.Buffer
	if err := wire.WriteJob(&stdin, j); err != nil {
		t.Fatal(err)
	}
	started, err := d.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer started.Close()
	pr, pw := io.Pipe()
	type decoded struct {
		o   outcome
		err error
	}
	done := make(chan decoded, 1)
	go func() {
		o := outcome{out: map[string]string{}, data: map[string][]byte{}}
		dec := wire.NewDecoder(pr, wire.LimitsFor(j))
		for {
			f, err := dec.Next()
			if err != nil {
				pr.CloseWithError(io.ErrClosedPipe)
				if err == io.EOF {
					err = nil
				}
				done <- decoded{o, err}
				return
			}
			switch f.Type {
			case wire.FrameStdout, wire.FrameStderr:
				o.out[f.Type.String()+"/"+f.Phase] += string(f.Data)
			case wire.FramePhase:
				o.phases = append(o.phases, f.PhaseEnd)
			case wire.FrameArtifact:
				o.artifacts = append(o.artifacts, f.Artifact)
			case wire.FrameArtifactData:
				o.data[f.Artifact.Path] = append(o.data[f.Artifact.Path], f.Data...)
			case wire.FrameResult:
				o.result = f.Result
			}
		}
	}()
	var logs bytes.Buffer
	code, err := started.Stream(ctx, stdin.Bytes(), pw, &logs)
	pw.Close()
	r := <-done
	if err != nil || r.err != nil || code != 0 {
		t.Fatalf("stream: exit %d, %v; decode: %v; supervisor log: %s; output %q", code, err, r.err, logs.String(), r.o.out)
	}
	return r.o
}
