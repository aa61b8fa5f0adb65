package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
)

// TestIntegrationRuns: code runs through the host, the real Docker driver
// and the small test toolbox carrying this tree's sandbox-worker: shell and
// argv modes, setup as root then the command as the run's uid, the project
// read-only, an artifact out, a timeout and a cancel that kill and remove,
// and an approved network run reaching a loopback server in egress.allow
// through an in-process broker's proxy route while other ports are refused.
// make integration sets SANDBOX_IT_DOCKER and SANDBOX_IT_TOOLBOX_TAR.
func TestIntegrationRuns(t *testing.T) {
	dockerHost, base := os.Getenv("SANDBOX_IT_DOCKER"), os.Getenv("SANDBOX_IT_TOOLBOX_TAR")
	if dockerHost == "" || base == "" {
		t.Skip("integration test: set SANDBOX_IT_DOCKER and SANDBOX_IT_TOOLBOX_TAR (test/integration.sh sets both) to run code runs in a real dockerd")
	}
	if os.Getuid() != 0 {
		t.Skip("integration test: code runs need root here (chown of the project and turn directories)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("/tmp", "sbrun")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)

	// The static worker test/integration.sh built, else this tree's.
	bin := os.Getenv("SANDBOX_IT_SANDBOX_WORKER")
	if bin == "" {
		bin = filepath.Join(dir, "sandbox-worker")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/roundtable-sandbox/sandbox/cmd/sandbox-worker")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build sandbox-worker: %v: %s", err, out)
		}
	}
	w, err := toolbox.ReadWorker(bin)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := toolbox.Connect(dockerHost)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	tag := fmt.Sprintf("roundtable-sandbox-runs-it:%d", time.Now().UnixNano())
	if _, err := toolbox.Import(ctx, tb, toolbox.ImportOptions{BaseTar: base, Worker: w, Tag: tag}); err != nil {
		t.Fatal(err)
	}
	defer tb.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})

	marker := "PROJECT-IT-" + fmt.Sprint(time.Now().UnixNano())
	project := filepath.Join(dir, "project")
	os.Mkdir(project, 0o755)
	os.WriteFile(filepath.Join(project, "hello.txt"), []byte(marker+"\n"), 0o644)

	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "EGRESS-OK")
	}))
	defer srv.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	y := fmt.Sprintf(`model:
  url: https://model.invalid/v1/chat/completions
  name: m
credentials:
  default: model
installation: it-runs
egress:
  allow: [%q]
runs:
  image: %s
  memoryMb: 256
  tmpfsMb: 32
  outputMb: 16
`, srv.Listener.Addr().String(), tag)
	p := filepath.Join(dir, "sandbox.yaml")
	os.WriteFile(p, []byte(y), 0o600)
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RunRoot, cfg.WorkspaceRoot, cfg.PolicyDir = filepath.Join(dir, "run"), filepath.Join(dir, "ws"), filepath.Join(dir, "pol")
	cfg.StateFile = filepath.Join(dir, "state", "channels.json")
	// A project under /tmp passes here only: the host unit hides /tmp, so
	// configuration refuses it; this test's host is not confined.
	cfg.Runs.Projects = []config.Project{{Name: "demo", Path: project}}
	if err := cfg.EnsureDirs(); err != nil {
		t.Fatal(err)
	}
	d, err := container.New(dockerHost)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, _, err := host.LoadState(cfg.StateFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	const hostUID = 65534
	creds := filepath.Join(dir, "creds")
	os.Mkdir(creds, 0o700)
	units := &inProcessBrokers{t: t, runRoot: cfg.RunRoot, policyDir: cfg.PolicyDir, credentials: creds, uid: hostUID, gid: hostUID,
		running: map[string]*runningBroker{}}
	h, err := host.New(host.Options{Config: cfg, State: st, Containers: dockerEngine{d}, Units: units,
		UID: hostUID, GID: hostUID, PeerGroups: func(int) []int { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()

	run := func(t *testing.T, p runs.Params) runs.Status {
		t.Helper()
		st, err := host.Kind[*coderun.Kind](h).Start(p, 0)
		if err != nil {
			t.Fatalf("StartRun: %v", err)
		}
		return waitFinishedRun(t, h, st.ID, st.State == runs.StateAwaitingApproval)
	}
	t.Run("shell with setup, project, artifact", func(t *testing.T) {
		st := run(t, runs.Params{Project: "demo", Setup: []string{"echo SETUP-UID=$(id -u)"}, Artifacts: []string{"out/result.txt"},
			Command: `echo MAIN-UID=$(id -u); grep ^CapEff: /proc/self/status; cat /workspace/hello.txt
touch /workspace/x 2>/dev/null && echo WS-WRITABLE || echo WS-READ-ONLY
mkdir -p /output/out && echo result-body > /output/out/result.txt; exit 3`})
		if st.Result != runs.ResultFailed || st.ExitCode == nil || *st.ExitCode != 3 {
			t.Fatalf("status %+v", st)
		}
		for _, want := range []string{"SETUP-UID=0\n", marker, "WS-READ-ONLY", "CapEff:\t0000000000000000"} {
			if !strings.Contains(st.Stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, st.Stdout)
			}
		}
		if strings.Contains(st.Stdout, "MAIN-UID=0\n") || !strings.Contains(st.Stdout, "MAIN-UID=") {
			t.Errorf("main ran as root:\n%s", st.Stdout)
		}
		if len(st.Artifacts) != 1 || string(st.Artifacts[0].Data) != "result-body\n" {
			t.Errorf("artifacts %+v", st.Artifacts)
		}
	})
	t.Run("argv mode", func(t *testing.T) {
		st := run(t, runs.Params{Executable: "python3", Args: []string{"-c", "import sys; print('argv', sys.argv[1:]); sys.stderr.write('to stderr\\n')", "a b", "$HOME"}})
		if st.Result != runs.ResultOK || !strings.Contains(st.Stdout, "argv ['a b', '$HOME']") || st.Stderr != "to stderr\n" {
			t.Errorf("status %+v", st)
		}
	})
	t.Run("timeout kills and removes", func(t *testing.T) {
		start := time.Now()
		st := run(t, runs.Params{Command: "echo started; sleep 60", TimeoutSeconds: 2})
		if st.Result != runs.ResultTimeout || !strings.Contains(st.Stdout, "started") || time.Since(start) > 30*time.Second {
			t.Errorf("status %+v after %s", st, time.Since(start))
		}
	})
	t.Run("cancel kills and removes", func(t *testing.T) {
		st, err := host.Kind[*coderun.Kind](h).Start(runs.Params{Command: "sleep 60"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, h, st.ID, runs.StateRunning)
		time.Sleep(500 * time.Millisecond)
		if err := cancelRun(h, st.ID); err != nil {
			t.Fatal(err)
		}
		if got := waitFinishedRun(t, h, st.ID, false); got.Result != runs.ResultCancelled {
			t.Errorf("status %+v", got)
		}
	})
	t.Run("approved network through the proxy route", func(t *testing.T) {
		script := fmt.Sprintf(`
import urllib.request, urllib.error
def get(label, url, opener=None):
    try:
        print(label, (opener or urllib.request.build_opener()).open(url, timeout=10).read().decode())
    except urllib.error.HTTPError as e:
        print(label, "HTTP", e.code)
    except Exception as e:
        print(label, "ERR", type(e).__name__)
get("ALLOWED", "http://%s/")
get("OTHER", "http://%s/")
get("META", "http://169.254.169.254/")
get("DIRECT", "http://%s/", urllib.request.build_opener(urllib.request.ProxyHandler({})))
`, srv.Listener.Addr(), other.Addr(), srv.Listener.Addr())
		st := run(t, runs.Params{Executable: "python3", Args: []string{"-c", script}, Network: true})
		for _, want := range []string{"ALLOWED EGRESS-OK", "OTHER HTTP 403", "META HTTP 403", "DIRECT ERR"} {
			if !strings.Contains(st.Stdout, want) {
				t.Errorf("stdout lacks %q:\n%s%s", want, st.Stdout, st.Stderr)
			}
		}
		if hits.Load() != 1 {
			t.Errorf("server hits %d, want 1", hits.Load())
		}
	})
	if left, err := d.List(context.Background(), "it-runs"); err != nil || len(left) != 0 {
		t.Errorf("containers left: %v, %v", left, err)
	}
	for _, dd := range []string{cfg.RunRoot, cfg.PolicyDir} {
		if e, _ := os.ReadDir(dd); len(e) != 0 {
			t.Errorf("%s not empty after the runs: %v", dd, e)
		}
	}
	if errs := units.errors(); len(errs) != 0 {
		t.Errorf("broker errors: %v", errs)
	}
}

// waitFinishedRun approves a network run as the host's own uid (an admin)
// when asked, and waits for its result.
func waitFinishedRun(t *testing.T, h *host.Host, id string, approve bool) runs.Status {
	t.Helper()
	if approve {
		if err := approveRun(h, id, 65534); err != nil {
			t.Fatalf("approve: %v", err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		st, err := runStatus(h, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == runs.StateFinished {
			// A run answers before its cleanup (docs/code-runs.md): the
			// leftover checks wait for its end, the container removed.
			if r, err := host.Kind[*coderun.Kind](h).Registry().Get(id); err == nil {
				select {
				case <-r.Ended():
				case <-time.After(2 * time.Minute):
					t.Fatalf("run %s: its cleanup did not end", id)
				}
			}
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("run %s did not finish", id)
	return runs.Status{}
}

func waitState(t *testing.T, h *host.Host, id, state string) {
	t.Helper()
	for i := 0; i < 600; i++ {
		if st, _ := runStatus(h, id); st.State == state {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("run %s never reached %s", id, state)
}

// runStatus, approveRun and cancelRun act on a run through the host's
// code-run kind, as the API's handlers do.
func runStatus(h *host.Host, id string) (runs.Status, error) {
	r, err := host.Kind[*coderun.Kind](h).Registry().Get(id)
	if err != nil {
		return runs.Status{}, err
	}
	return r.Status(), nil
}

func approveRun(h *host.Host, id string, uid int) error {
	r, err := host.Kind[*coderun.Kind](h).Registry().Get(id)
	if err != nil {
		return err
	}
	return r.Approve(uid)
}

func cancelRun(h *host.Host, id string) error {
	r, err := host.Kind[*coderun.Kind](h).Registry().Get(id)
	if err != nil {
		return err
	}
	return r.Cancel()
}
