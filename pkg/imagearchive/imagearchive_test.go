package imagearchive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func untar(t *testing.T, data []byte) (map[string][]byte, []*tar.Header) {
	t.Helper()
	files := map[string][]byte{}
	var hdrs []*tar.Header
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, hdrs
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
		hdrs = append(hdrs, h)
	}
}

func opts() Options {
	return Options{
		Tags:       []string{"roundtable-sandbox-worker:latest", "roundtable-sandbox-worker:1.2.3"},
		Arch:       "amd64",
		User:       "65534:65534",
		Entrypoint: "/sandbox-worker",
		Time:       time.Unix(1700000000, 0),
	}
}

func hexsum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestBuildDockerArchive(t *testing.T) {
	bin := []byte("\x7fELF fake static binary")
	data, err := Build(bin, opts())
	if err != nil {
		t.Fatal(err)
	}
	files, hdrs := untar(t, data)
	var manifest []manifestEntry
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	m := manifest[0]
	if strings.Join(m.RepoTags, " ") != "roundtable-sandbox-worker:latest roundtable-sandbox-worker:1.2.3" {
		t.Errorf("RepoTags = %v", m.RepoTags)
	}
	cfgBytes := files[m.Config]
	if m.Config != hexsum(cfgBytes)+".json" {
		t.Errorf("config name %s is not its digest", m.Config)
	}
	var cfg map[string]any
	if err := json.Unmarshal(cfgBytes, &cfg); err != nil {
		t.Fatal(err)
	}
	run, _ := cfg["config"].(map[string]any)
	if len(run) != 2 || run["User"] != "65534:65534" || mustJSON(run["Entrypoint"]) != `["/sandbox-worker"]` {
		t.Errorf("config = %v, want only User and Entrypoint (no Env)", run)
	}
	if cfg["os"] != "linux" || cfg["architecture"] != "amd64" || cfg["created"] != "2023-11-14T22:13:20Z" {
		t.Errorf("config header = %v %v %v", cfg["os"], cfg["architecture"], cfg["created"])
	}
	if len(m.Layers) != 1 {
		t.Fatalf("layers = %v", m.Layers)
	}
	layer := files[m.Layers[0]]
	diffIDs := mustJSON(cfg["rootfs"].(map[string]any)["diff_ids"])
	if diffIDs != `["sha256:`+hexsum(layer)+`"]` {
		t.Errorf("diff_ids %s do not match the layer", diffIDs)
	}
	inner, innerHdrs := untar(t, layer)
	if len(inner) != 1 || !bytes.Equal(inner["sandbox-worker"], bin) {
		t.Fatalf("layer holds %d files, want only sandbox-worker", len(inner))
	}
	h := innerHdrs[0]
	if h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || h.Typeflag != tar.TypeReg || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("binary header = mode %o uid %d gid %d type %c mtime %v", h.Mode, h.Uid, h.Gid, h.Typeflag, h.ModTime)
	}
	for _, h := range hdrs {
		if !h.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s mtime %v not fixed", h.Name, h.ModTime)
		}
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestBuildDeterministic(t *testing.T) {
	a, err := Build([]byte("bin"), opts())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a wall-clock leak would change the bytes
	b, _ := Build([]byte("bin"), opts())
	if !bytes.Equal(a, b) {
		t.Errorf("two builds differ")
	}
	o := opts()
	o.Time = time.Unix(1700000001, 0)
	if c, _ := Build([]byte("bin"), o); bytes.Equal(a, c) {
		t.Errorf("Time does not reach the archive")
	}
}

func TestBuildRefuses(t *testing.T) {
	for name, mod := range map[string]func(*Options){
		"root user":      func(o *Options) { o.User = "0:0" },
		"named user":     func(o *Options) { o.User = "nobody" },
		"no tags":        func(o *Options) { o.Tags = nil },
		"duplicate tag":  func(o *Options) { o.Tags = []string{"a:b", "a:b"} },
		"bad tag":        func(o *Options) { o.Tags = []string{"Upper:latest"} },
		"untagged":       func(o *Options) { o.Tags = []string{"worker"} },
		"nested entry":   func(o *Options) { o.Entrypoint = "/usr/bin/w" },
		"relative entry": func(o *Options) { o.Entrypoint = "w" },
		"no arch":        func(o *Options) { o.Arch = "" },
	} {
		o := opts()
		mod(&o)
		if _, err := Build([]byte("bin"), o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
}
