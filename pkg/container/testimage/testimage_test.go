package testimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"testing"
)

func TestWrite(t *testing.T) {
	var buf bytes.Buffer
	bin := []byte("\x7fELF fake binary")
	if err := Write(&buf, "example:test", bin); err != nil {
		t.Fatalf("Write: %v", err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading archive: %v", err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest = %q, %v", files["manifest.json"], err)
	}
	m := manifest[0]
	if len(m.RepoTags) != 1 || m.RepoTags[0] != "example:test" {
		t.Errorf("RepoTags = %v, want [example:test]", m.RepoTags)
	}
	layer, ok := files[m.Layers[0]]
	if !ok {
		t.Fatalf("layer %s missing", m.Layers[0])
	}
	var cfg struct {
		Config struct{ Entrypoint []string }
		Rootfs struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(files[m.Config], &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	sum := sha256.Sum256(layer)
	if want := "sha256:" + hex.EncodeToString(sum[:]); len(cfg.Rootfs.DiffIDs) != 1 || cfg.Rootfs.DiffIDs[0] != want {
		t.Errorf("diff_ids = %v, want [%s]", cfg.Rootfs.DiffIDs, want)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != Entrypoint {
		t.Errorf("Entrypoint = %v, want [%s]", cfg.Config.Entrypoint, Entrypoint)
	}
	lr := tar.NewReader(bytes.NewReader(layer))
	h, err := lr.Next()
	if err != nil || h.Name != "worker" || h.Mode != 0o755 {
		t.Fatalf("layer entry = %+v, %v; want worker 0755", h, err)
	}
	if got, _ := io.ReadAll(lr); !bytes.Equal(got, bin) {
		t.Errorf("layer binary = %q, want %q", got, bin)
	}
	if Write(&bytes.Buffer{}, "", bin) == nil || Write(&bytes.Buffer{}, "x:y", nil) == nil {
		t.Error("Write accepted an empty tag or binary")
	}
}
