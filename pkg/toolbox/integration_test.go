package toolbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// itDocker connects to the test dockerd (SANDBOX_IT_DOCKER, which
// test/integration.sh sets) or skips.
func itDocker(t *testing.T) *client.Client {
	t.Helper()
	host := os.Getenv("SANDBOX_IT_DOCKER")
	if host == "" {
		t.Skip("set SANDBOX_IT_DOCKER=unix:///path/docker.sock (make integration does) to import into a real dockerd")
	}
	cli, err := Connect(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// checkImported checks an imported toolbox against a real daemon: config,
// labels, and the worker's bytes, mode and owner read back from a created
// (never started) container.
func checkImported(t *testing.T, ctx context.Context, cli *client.Client, img Image, w Worker) {
	t.Helper()
	resp, err := cli.ImageInspect(ctx, img.Tag)
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Config
	if c.WorkingDir != "/workspace" || !slices.Equal(c.Cmd, []string{layout.ToolboxWorker, "run-supervise"}) {
		t.Errorf("workdir %q cmd %q", c.WorkingDir, c.Cmd)
	}
	for _, want := range []string{"PATH=" + PathEnv, "LANG=C.UTF-8"} {
		if !slices.Contains(c.Env, want) {
			t.Errorf("env %q lacks %q", c.Env, want)
		}
	}
	if c.Labels[LabelWorkerSHA256] != w.SHA256 {
		t.Errorf("worker label %q, want %q", c.Labels[LabelWorkerSHA256], w.SHA256)
	}
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: img.Tag, NetworkDisabled: true}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	rc, _, err := cli.CopyFromContainer(ctx, created.ID, layout.ToolboxWorker)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(tr)
	if h.Name != "sandbox-worker" || h.Mode&0o7777 != 0o755 || h.Uid != 0 || h.Gid != 0 || string(body) != string(w.Data) {
		t.Errorf("worker in the image: %q mode %o %d:%d, %d bytes; want sandbox-worker 0755 0:0, %d bytes", h.Name, h.Mode, h.Uid, h.Gid, len(body), len(w.Data))
	}
}

func itTag(t *testing.T, cli *client.Client) string {
	tag := fmt.Sprintf("roundtable-sandbox-toolbox-it:%d", time.Now().UnixNano())
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return tag
}

func TestIntegrationImportSyntheticRootfs(t *testing.T) {
	cli := itDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := testWorker(t)
	tag := itTag(t, cli)
	img, err := Import(ctx, cli, ImportOptions{BaseTar: baseFile(t), Worker: w, Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	if img.Packages != "bash=5.2.15-2+b7,python3=3.11.2-1+b1" || img.ID == "" {
		t.Errorf("image %+v", img)
	}
	checkImported(t, ctx, cli, img, w)

	// A refused base never reaches the daemon: no image under the tag.
	tag2 := itTag(t, cli)
	bad := baseFile(t, member{name: "./usr/lib/roundtable-sandbox/sandbox-worker", typ: tar.TypeReg, mode: 0o755, body: "old"})
	if _, err := Import(ctx, cli, ImportOptions{BaseTar: bad, Worker: w, Tag: tag2}); !errors.Is(err, ErrBaseHoldsWorker) {
		t.Fatalf("got %v, want ErrBaseHoldsWorker", err)
	}
	if _, err := Inspect(ctx, cli, tag2); !errors.Is(err, ErrAbsent) {
		t.Errorf("after a refused import: %v, want ErrAbsent", err)
	}
}

// TestIntegrationImportSmallToolbox imports the real small toolbox base
// (SANDBOX_IT_TOOLBOX_TAR, test/toolbox/build.sh's cache file).
func TestIntegrationImportSmallToolbox(t *testing.T) {
	cli := itDocker(t)
	base := os.Getenv("SANDBOX_IT_TOOLBOX_TAR")
	if base == "" {
		t.Skip("set SANDBOX_IT_TOOLBOX_TAR to a base tar (test/toolbox/build.sh prints one) to import the small toolbox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := testWorker(t)
	if p := os.Getenv("SANDBOX_IT_SANDBOX_WORKER"); p != "" { // the real static worker, as integration.sh builds it
		var err error
		if w, err = ReadWorker(p); err != nil {
			t.Fatal(err)
		}
	}
	tag := itTag(t, cli)
	start := time.Now()
	img, err := Import(ctx, cli, ImportOptions{BaseTar: base, Worker: w, Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("imported %s in %v: %s, %.1f MB, packages %s", base, time.Since(start).Round(time.Millisecond), img.ID, float64(img.Size)/1e6, img.Packages)
	for _, p := range SmallPackages {
		if !strings.Contains(","+img.Packages, ","+p+"=") {
			t.Errorf("packages label %q lacks %s", img.Packages, p)
		}
	}
	checkImported(t, ctx, cli, img, w)
}

// TestToolboxBuildSmall runs the real mmdebstrap for the small toolbox
// (about 30 to 45 s, root, the machine's Debian mirror).
func TestToolboxBuildSmall(t *testing.T) {
	if os.Getenv("SANDBOX_IT_TOOLBOX") != "1" {
		t.Skip("set SANDBOX_IT_TOOLBOX=1 (as root, with mmdebstrap and the Debian mirror) to build the small toolbox for real")
	}
	if os.Geteuid() != 0 {
		t.Skip("SANDBOX_IT_TOOLBOX=1 needs root")
	}
	work := t.TempDir()
	start := time.Now()
	b, err := BuildBase(context.Background(), BaseOptions{Packages: SmallPackages, WorkDir: work})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove()
	f, err := os.Open(b.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	s, err := copyBase(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %v: %d members, %.1f MB", time.Since(start).Round(time.Second), s.entries, float64(st.Size())/1e6)
	label, err := packagesLabel(s.packages)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range SmallPackages {
		if !strings.Contains(","+label, ","+p+"=") {
			t.Errorf("packages %q lack %s", label, p)
		}
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Errorf("left in the work dir: %v", ents)
	}
}
