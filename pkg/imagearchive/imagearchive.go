// Package imagearchive builds a single-layer FROM scratch image holding one
// static binary as a docker-archive tar (what `docker load` accepts) without
// any Docker engine. Output is deterministic: fixed mtimes, fixed ordering,
// and only a numeric non-root User and an Entrypoint in the config (no Env).
package imagearchive

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Options describe the image. The zero Time is the Unix epoch.
type Options struct {
	Tags       []string  // repo:tag, at least one
	Arch       string    // GOARCH of the binary
	User       string    // numeric uid:gid
	Entrypoint string    // absolute path of the binary in the image
	Time       time.Time // every mtime and "created"
}

// ErrInvalid reports options that would make an image docker refuses or
// that differs from the Dockerfile's contract.
var ErrInvalid = errors.New("invalid image option")

var (
	tagRe  = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	userRe = regexp.MustCompile(`^[1-9][0-9]{0,9}:[1-9][0-9]{0,9}$`)
	pathRe = regexp.MustCompile(`^/[A-Za-z0-9._-]{1,64}$`)
)

// imageConfig is the OCI/Docker image config subset docker load needs.
type imageConfig struct {
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Created      string        `json:"created"`
	Config       runConfig     `json:"config"`
	RootFS       rootFS        `json:"rootfs"`
	History      []historyItem `json:"history"`
}

type runConfig struct {
	User       string   `json:"User"`
	Entrypoint []string `json:"Entrypoint"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type historyItem struct {
	Created    string `json:"created"`
	CreatedBy  string `json:"created_by"`
	EmptyLayer bool   `json:"empty_layer,omitempty"`
}

type manifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

func (o Options) validate() error {
	if len(o.Tags) == 0 {
		return fmt.Errorf("at least one tag: %w", ErrInvalid)
	}
	seen := map[string]bool{}
	for _, t := range o.Tags {
		if !tagRe.MatchString(t) || seen[t] {
			return fmt.Errorf("tag %q is not a unique repo:tag: %w", t, ErrInvalid)
		}
		seen[t] = true
	}
	if !userRe.MatchString(o.User) {
		return fmt.Errorf("user %q must be a numeric non-root uid:gid: %w", o.User, ErrInvalid)
	}
	if !pathRe.MatchString(o.Entrypoint) {
		return fmt.Errorf("entrypoint %q must be a top-level absolute path: %w", o.Entrypoint, ErrInvalid)
	}
	if o.Arch == "" {
		return fmt.Errorf("arch is required: %w", ErrInvalid)
	}
	return nil
}

// tarFile appends one regular file with fixed metadata.
func tarFile(tw *tar.Writer, name string, mode int64, mtime time.Time, data []byte) error {
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     mode,
		Size:     int64(len(data)),
		ModTime:  mtime,
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Build returns a docker-archive (what `docker load` accepts): manifest.json,
// the config JSON named by its digest, and one layer tar holding only the
// binary. The bytes depend only on bin and o.
func Build(bin []byte, o Options) ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if len(bin) == 0 {
		return nil, fmt.Errorf("empty binary: %w", ErrInvalid)
	}
	mtime := o.Time.UTC().Truncate(time.Second)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := tarFile(lw, o.Entrypoint[1:], 0o755, mtime, bin); err != nil {
		return nil, err
	}
	if err := lw.Close(); err != nil {
		return nil, err
	}
	layerHex := sha(layer.Bytes())
	created := mtime.Format(time.RFC3339)
	cfg := imageConfig{
		Architecture: o.Arch,
		OS:           "linux",
		Created:      created,
		Config:       runConfig{User: o.User, Entrypoint: []string{o.Entrypoint}},
		RootFS:       rootFS{Type: "layers", DiffIDs: []string{"sha256:" + layerHex}},
		History: []historyItem{
			{Created: created, CreatedBy: "COPY sandbox-worker " + o.Entrypoint},
			{Created: created, CreatedBy: "USER " + o.User, EmptyLayer: true},
			{Created: created, CreatedBy: `ENTRYPOINT ["` + o.Entrypoint + `"]`, EmptyLayer: true},
		},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgName := sha(cfgJSON) + ".json"
	layerName := layerHex + "/layer.tar"
	manifest, err := json.Marshal([]manifestEntry{{Config: cfgName, RepoTags: o.Tags, Layers: []string{layerName}}})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{cfgName, cfgJSON}, {layerName, layer.Bytes()}, {"manifest.json", manifest}} {
		if err := tarFile(tw, f.name, 0o644, mtime, f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
