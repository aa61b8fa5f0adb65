// Package testimage writes a minimal single-layer docker-archive (the format
// of `docker save` / `docker load`) holding one static binary as the image's
// entrypoint, so integration tests and benchmarks get a FROM scratch image
// without a builder or a registry. It is test tooling, never used by the
// installed binaries.
package testimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"time"
)

// Entrypoint is where the binary lives inside the image.
const Entrypoint = "/worker"

// epoch keeps archives reproducible.
var epoch = time.Unix(0, 0).UTC()

// Write writes a docker-archive of a FROM scratch image tagged tag whose
// entrypoint is binary, running as uid:gid 65534 unless the container says otherwise.
func Write(w io.Writer, tag string, binary []byte) error {
	if tag == "" || len(binary) == 0 {
		return errors.New("testimage: tag and binary are required")
	}
	var layer bytes.Buffer
	lt := tar.NewWriter(&layer)
	if err := lt.WriteHeader(&tar.Header{Name: Entrypoint[1:], Mode: 0o755, Size: int64(len(binary)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := lt.Write(binary); err != nil {
		return err
	}
	if err := lt.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(layerSum[:])

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": []string{Entrypoint},
			"User":       "65534:65534",
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}},
		"history": []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "testimage"}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := layerHex + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{tag},
		"Layers":   []string{layerName},
	}})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: layerHex + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{layerName, layer.Bytes()}, {configName, config}, {"manifest.json", manifest}} {
		if err := add(f.name, f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
