// Package testimage writes a minimal single-layer docker-archive (the format
// of `docker save` / `docker load`) holding one static binary as the image's
// entrypoint, so integration tests and benchmarks get a FROM scratch image
// without a builder or a registry. It is test tooling, never used by the
// installed binaries; the archive itself comes from pkg/imagearchive, the
// same builder that makes the shipped worker image.
package testimage

import (
	"errors"
	"io"
	"runtime"

	"github.com/roundtable-sandbox/sandbox/pkg/imagearchive"
)

// Entrypoint is where the binary lives inside the image.
const Entrypoint = "/worker"

// Write writes a docker-archive of a FROM scratch image tagged tag whose
// entrypoint is binary, running as uid:gid 65534 unless the container says otherwise.
func Write(w io.Writer, tag string, binary []byte) error {
	if tag == "" || len(binary) == 0 {
		return errors.New("testimage: tag and binary are required")
	}
	data, err := imagearchive.Build(binary, imagearchive.Options{
		Tags:       []string{tag},
		Arch:       runtime.GOARCH,
		User:       "65534:65534",
		Entrypoint: Entrypoint,
	})
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
