package reaper

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/container/testimage"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// TestIntegrationReapDocker runs a pass against a real dockerd: containers
// are only created, never started, so the image's binary is a placeholder.
func TestIntegrationReapDocker(t *testing.T) {
	host := os.Getenv("SANDBOX_IT_DOCKER")
	if host == "" {
		t.Skip("integration test skipped: set SANDBOX_IT_DOCKER=unix:///path/docker.sock to run it against a real dockerd")
	}
	ctx := context.Background()
	d, err := container.New(host)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const image = "roundtable-sandbox-it-reaper:latest"
	archive := filepath.Join(t.TempDir(), "image.tar")
	var buf bytes.Buffer
	if err := testimage.Write(&buf, image, []byte("placeholder, never run")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.LoadImage(ctx, archive); err != nil {
		t.Fatalf("LoadImage: %v", err)
	}

	root, _ := filepath.EvalSymlinks(t.TempDir())
	ws, turnDir := filepath.Join(root, "ws"), filepath.Join(root, "turn")
	os.Mkdir(ws, 0o700)
	os.Mkdir(turnDir, 0o700)
	now := time.Now()
	create := func(installation string, deadline time.Time) string {
		turn := ids.NewTurnID()
		name, _ := ids.ContainerName("reap", turn)
		t.Cleanup(func() { d.Remove(context.Background(), name) })
		_, err := d.Create(ctx, container.Spec{
			Name: name, Image: image, UID: 1000, GID: 1000, WorkspaceDir: ws, TurnDir: turnDir,
			MemoryMB: 64, CPUs: 0.5, Pids: 16, TmpfsMB: 1, LogTag: ids.LogTag("reap"),
			Labels: map[string]string{
				layout.LabelInstallation: installation, layout.LabelTurn: turn,
				layout.LabelChannel: "reap", layout.LabelDeadline: strconv.FormatInt(deadline.Unix(), 10),
			},
		})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		return turn
	}
	inst := "it-reap-" + strconv.FormatInt(now.UnixNano()%1e9, 36)
	expired := create(inst, now.Add(-5*time.Minute))
	live := create(inst, now.Add(time.Minute))
	unknown := create(inst, now.Add(time.Minute))
	other := create("it-reap-other", now.Add(-5*time.Minute))

	r := &Reaper{
		Installation: inst, RunRoot: filepath.Join(root, "runroot"), PolicyDir: filepath.Join(root, "policies"),
		Grace: time.Second, Containers: d, Units: &fakeUnits{},
		Active: func(context.Context) (map[string]bool, bool, error) { return map[string]bool{live: true}, true, nil },
		// Container creation times have one-second resolution: start the
		// pass two seconds later so the containers predate it.
		Now: func() time.Time { return time.Now().Add(2 * time.Second) },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	sum, err := r.Reap(ctx)
	if err != nil || sum.Containers != 2 {
		t.Fatalf("Reap = %+v, %v; want 2 containers removed", sum, err)
	}
	left := func(installation string) []string {
		list, err := d.List(ctx, installation)
		if err != nil {
			t.Fatal(err)
		}
		var turns []string
		for _, c := range list {
			turns = append(turns, c.Labels[layout.LabelTurn])
		}
		return turns
	}
	if got := left(inst); !slices.Equal(got, []string{live}) {
		t.Errorf("containers left = %v, want only the live turn %s (expired %s, unknown %s)", got, live, expired, unknown)
	}
	if got := left("it-reap-other"); !slices.Equal(got, []string{other}) {
		t.Errorf("another installation's container was touched: left %v, want [%s]", got, other)
	}
	// A second pass is a no-op: idempotent.
	if sum, err := r.Reap(ctx); err != nil || sum != (Summary{HostKnown: true}) {
		t.Errorf("second Reap = %+v, %v; want nothing to do", sum, err)
	}
}
