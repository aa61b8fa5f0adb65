package toolbox

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// fakeDocker stands in for the Engine API: it reads the import stream as a
// tar and remembers the changes; Inspect answers from them.
type fakeDocker struct {
	imported  map[string][]string // tag -> changes
	members   []*tar.Header
	bodies    map[string]string
	calls     int
	readFirst int64  // bytes to read before failing (with fail)
	fail      error  // ImageImport's error
	stream    string // the daemon's JSON answer
}

func (f *fakeDocker) ImageImport(ctx context.Context, src image.ImportSource, ref string, o image.ImportOptions) (io.ReadCloser, error) {
	f.calls++
	if src.SourceName != "-" {
		return nil, fmt.Errorf("source %q, want -", src.SourceName)
	}
	if f.fail != nil {
		io.CopyN(io.Discard, src.Source, f.readFirst)
		return nil, f.fail
	}
	tr := tar.NewReader(src.Source)
	f.bodies = map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return io.NopCloser(strings.NewReader(`{"error":"` + err.Error() + `","errorDetail":{"message":"` + err.Error() + `"}}`)), nil
		}
		f.members = append(f.members, h)
		b, _ := io.ReadAll(tr)
		f.bodies[h.Name] = string(b)
	}
	if f.imported == nil {
		f.imported = map[string][]string{}
	}
	stream := f.stream
	if stream == "" {
		stream = `{"status":"sha256:0123"}` + "\n"
	} else {
		return io.NopCloser(strings.NewReader(stream)), nil
	}
	f.imported[ref] = o.Changes
	return io.NopCloser(strings.NewReader(stream)), nil
}

func (f *fakeDocker) ImageInspect(ctx context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	changes, ok := f.imported[ref]
	if !ok {
		return image.InspectResponse{}, fmt.Errorf("no such image: %w", cerrdefs.ErrNotFound)
	}
	type config struct {
		WorkingDir string
		Cmd        []string
		Labels     map[string]string
	}
	cfg := config{Labels: map[string]string{}}
	for _, c := range changes {
		switch {
		case strings.HasPrefix(c, "WORKDIR "):
			cfg.WorkingDir = strings.TrimPrefix(c, "WORKDIR ")
		case strings.HasPrefix(c, "LABEL "):
			k, v, _ := strings.Cut(strings.TrimPrefix(c, "LABEL "), "=")
			cfg.Labels[k] = strings.Trim(v, `"`)
		case strings.HasPrefix(c, "CMD "):
			json.Unmarshal([]byte(strings.TrimPrefix(c, "CMD ")), &cfg.Cmd)
		}
	}
	// Through JSON: the response's config type lives in another module.
	raw, _ := json.Marshal(map[string]any{"Id": "sha256:0123", "Size": 4242, "Config": cfg})
	var resp image.InspectResponse
	err := json.Unmarshal(raw, &resp)
	return resp, err
}

func baseFile(t *testing.T, extra ...member) string {
	t.Helper()
	ms := append(append([]member(nil), baseMembers...), member{name: "./usr/lib/roundtable-sandbox/", typ: tar.TypeDir, mode: 0o755},
		member{name: "./usr/lib/roundtable-sandbox/toolbox-packages", typ: tar.TypeReg, mode: 0o644, body: "bash=5.2.15-2+b7\npython3=3.11.2-1+b1\n"})
	return writeFile(t, "base.tar", makeTar(t, append(ms, extra...)), 0o600)
}

func testWorker(t *testing.T) Worker {
	t.Helper()
	w, err := ReadWorker(writeFile(t, "sandbox-worker", fakeELF(false), 0o755))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestImportStreamsBaseThenWorkerWithConfig(t *testing.T) {
	d := &fakeDocker{}
	w := testWorker(t)
	img, err := Import(context.Background(), d, ImportOptions{BaseTar: baseFile(t), Worker: w, Tag: "toolbox-test:1"})
	if err != nil {
		t.Fatal(err)
	}
	if img.WorkerSHA256 != w.SHA256 || img.Packages != "bash=5.2.15-2+b7,python3=3.11.2-1+b1" || img.WorkDir != "/workspace" || img.ID != "sha256:0123" || img.Size != 4242 {
		t.Errorf("image %+v", img)
	}
	last := d.members[len(d.members)-1]
	if last.Name != "./usr/lib/roundtable-sandbox/sandbox-worker" || last.Mode != 0o755 || last.Uid != 0 || d.bodies[last.Name] != string(w.Data) {
		t.Errorf("last member %q mode %o uid %d (%d bytes), want the worker", last.Name, last.Mode, last.Uid, len(d.bodies[last.Name]))
	}
	if d.bodies["./etc/apt/apt.conf.d/90roundtable-sandbox-setup"] != AptConf {
		t.Errorf("the apt configuration for setup is missing: %v", d.bodies)
	}
	if got, want := len(d.members), len(baseMembers)+4; got != want {
		t.Errorf("%d members, want %d", got, want)
	}
	changes := strings.Join(d.imported["toolbox-test:1"], "\n")
	for _, want := range []string{"WORKDIR /workspace", "ENV PATH=/usr/local/sbin:", "ENV LANG=C.UTF-8", `CMD ["/usr/lib/roundtable-sandbox/sandbox-worker","run-supervise"]`, LabelWorkerSHA256 + `="` + w.SHA256 + `"`} {
		if !strings.Contains(changes, want) {
			t.Errorf("changes lack %q:\n%s", want, changes)
		}
	}
}

func TestImportRefusals(t *testing.T) {
	w := testWorker(t)
	for _, tc := range []struct {
		name string
		d    *fakeDocker
		base func(t *testing.T) string
		want string
		// calls is how many times Docker was asked to import.
		calls int
	}{
		{"base holds the worker", &fakeDocker{}, func(t *testing.T) string {
			return baseFile(t, member{name: "./usr/lib/roundtable-sandbox/sandbox-worker", typ: tar.TypeReg, mode: 0o755, body: "old"})
		}, "already holds the worker's path", 0},
		{"bad packages file", &fakeDocker{}, func(t *testing.T) string {
			return writeFile(t, "b.tar", makeTar(t, []member{{name: "./usr/lib/roundtable-sandbox/toolbox-packages", typ: tar.TypeReg, mode: 0o644, body: "bash=\"x\n"}}), 0o600)
		}, "not name=version", 0},
		{"no base", &fakeDocker{}, func(t *testing.T) string { return "/nonexistent/base.tar" }, "the base tar", 0},
		{"a directory as base", &fakeDocker{}, func(t *testing.T) string { return t.TempDir() }, "not a regular file", 0},
		{"daemon refuses at once", &fakeDocker{fail: errors.New("permission denied")}, func(t *testing.T) string { return baseFile(t) }, "permission denied", 1},
		{"daemon stops reading", &fakeDocker{fail: errors.New("no space left on device"), readFirst: 1024}, func(t *testing.T) string { return baseFile(t) }, "no space left on device", 1},
		{"daemon reports an error", &fakeDocker{stream: `{"status":"importing"}` + "\n" + `{"errorDetail":{"message":"layer broke"},"error":"layer broke"}`}, func(t *testing.T) string { return baseFile(t) }, "layer broke", 1},
		{"daemon output garbage", &fakeDocker{stream: `{"status":`}, func(t *testing.T) string { return baseFile(t) }, "docker import output", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Import(context.Background(), tc.d, ImportOptions{BaseTar: tc.base(t), Worker: w, Tag: "toolbox-test:1"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if tc.d.calls != tc.calls {
				t.Errorf("docker import called %d times, want %d", tc.d.calls, tc.calls)
			}
		})
	}
	if _, err := Import(context.Background(), &fakeDocker{}, ImportOptions{BaseTar: baseFile(t), Tag: "x:1"}); err == nil {
		t.Error("import without a worker accepted")
	}
}

func TestInspectAbsent(t *testing.T) {
	if _, err := Inspect(context.Background(), &fakeDocker{}, "nothing:here"); !errors.Is(err, ErrAbsent) {
		t.Errorf("got %v, want ErrAbsent", err)
	}
}

func TestReadWorker(t *testing.T) {
	w, err := ReadWorker(writeFile(t, "w", fakeELF(false), 0o755))
	if err != nil || len(w.SHA256) != 64 {
		t.Fatalf("a static ELF: %v", err)
	}
	if h, err := FileSHA256(w.Path); err != nil || h != w.SHA256 {
		t.Errorf("FileSHA256 = %q, %v; want %q", h, err, w.SHA256)
	}
	for _, tc := range []struct {
		name, want string
		path       func(t *testing.T) string
	}{
		{"dynamic", "dynamically linked", func(t *testing.T) string { return writeFile(t, "w", fakeELF(true), 0o755) }},
		{"a script", "not an ELF", func(t *testing.T) string { return writeFile(t, "w", []byte("#!/bin/sh\n"), 0o755) }},
		{"empty", "not a regular file of", func(t *testing.T) string { return writeFile(t, "w", nil, 0o755) }},
		{"a directory", "not a regular file of", func(t *testing.T) string { return t.TempDir() }},
		{"missing", "make build", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReadWorker(tc.path(t)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
