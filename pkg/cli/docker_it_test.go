package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// TestIntegrationDockerTurns runs whole turns through the real Docker driver
// (no systemd: broker units are faked, so the worker finds no broker and
// answers a failure) and checks that nothing is left behind. It logs the
// median of each phase. Enable with SANDBOX_IT_DOCKER=unix:///path/docker.sock
// (the worker image roundtable-sandbox-worker:latest must be loaded).
func TestIntegrationDockerTurns(t *testing.T) {
	dockerHost := os.Getenv("SANDBOX_IT_DOCKER")
	if dockerHost == "" {
		t.Skip("integration test: set SANDBOX_IT_DOCKER=unix:///path/docker.sock to run turns in a real dockerd")
	}
	const uid, gid = 65534, 65534 // a non-root worker identity
	dir, err := os.MkdirTemp("/tmp", "sbit")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	p := filepath.Join(dir, "sandbox.yaml")
	os.WriteFile(p, []byte(testYAML+"installation: it-host\nturnDeadlineSeconds: 30\n"), 0o600)
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RunRoot, cfg.WorkspaceRoot, cfg.PolicyDir = filepath.Join(dir, "run"), filepath.Join(dir, "ws"), filepath.Join(dir, "pol")
	cfg.StateFile = filepath.Join(dir, "state", "channels.json")
	cfg.MCP = nil
	if err := cfg.EnsureDirs(); err != nil {
		t.Fatal(err)
	}
	ws, _ := layout.WorkspaceDir(cfg.WorkspaceRoot, "it:1")
	os.Mkdir(ws, 0o700)
	os.Chown(ws, uid, gid)
	d, err := container.New(dockerHost)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, _, err := host.LoadState(cfg.StateFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	phases := map[string][]time.Duration{}
	observe := func(ph string, took time.Duration) {
		mu.Lock()
		phases[ph] = append(phases[ph], took)
		mu.Unlock()
	}
	h, err := host.New(host.Options{Config: cfg, State: st, Containers: dockerEngine{d}, Units: fakeUnits{},
		UID: uid, GID: gid, ObservePhase: observe, PeerGroups: func(int) []int { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	d.Observe = observe
	const n = 5
	for i := 0; i < n; i++ {
		_, _, err := h.RunTurn(context.Background(), host.TurnInput{Channel: "it:1", SpeakerID: "s", Text: "hello"})
		// Without a broker the worker fails; the host must still clean up.
		if err != nil && !errors.Is(err, host.ErrTurnFailed) {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	left, err := d.List(context.Background(), "it-host")
	if err != nil || len(left) != 0 {
		t.Errorf("containers left: %v, %v", left, err)
	}
	for _, dd := range []string{cfg.RunRoot, cfg.PolicyDir} {
		if e, _ := os.ReadDir(dd); len(e) != 0 {
			t.Errorf("%s not empty: %v", dd, e)
		}
	}
	for ph, ds := range phases {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		t.Logf("phase %-16s median %v (n=%d)", ph, ds[len(ds)/2].Round(100*time.Microsecond), len(ds))
	}
	_ = ids.NewTurnID
}
