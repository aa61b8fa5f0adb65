package toolbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// Docker is what Import and Inspect need of the Engine API;
// *github.com/docker/docker/client.Client has it (Connect returns one).
type Docker interface {
	ImageImport(ctx context.Context, source image.ImportSource, ref string, options image.ImportOptions) (io.ReadCloser, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
}

// Connect opens an Engine API client for host ("" = DOCKER_HOST or the
// default socket). Only local unix:// daemons are accepted, as in package
// container. The caller closes it.
func Connect(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("toolbox: docker client: %w", err)
	}
	u, err := url.Parse(cli.DaemonHost())
	if err != nil || u.Scheme != "unix" || !filepath.IsAbs(u.Path) {
		cli.Close()
		return nil, fmt.Errorf("toolbox: docker host %q: only unix:///absolute/path is allowed", cli.DaemonHost())
	}
	return cli, nil
}

// Image is an imported toolbox as Docker describes it.
type Image struct {
	Tag          string   `json:"tag"`
	ID           string   `json:"id"`
	Size         int64    `json:"size"`
	WorkerSHA256 string   `json:"workerSha256,omitempty"`
	Packages     string   `json:"packages,omitempty"`
	Version      string   `json:"version,omitempty"`
	WorkDir      string   `json:"workDir"`
	Cmd          []string `json:"cmd"`
}

// timeNow is the appended members' mtime when the worker's is unknown.
var timeNow = time.Now

// Worker is a checked sandbox-worker binary.
type Worker struct {
	Data   []byte
	SHA256 string
	Path   string
}

// ReadWorker reads and checks the worker binary: a regular file, at most
// 256 MiB, a statically linked ELF executable (the toolbox's libc is not
// the build machine's; `make build` links it with CGO_ENABLED=0).
func ReadWorker(p string) (Worker, error) {
	f, err := os.Open(p)
	if err != nil {
		return Worker{}, fmt.Errorf("toolbox: the worker binary: %w (the package installs %s; `make build` writes bin/sandbox-worker)", err, HostWorker)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Worker{}, fmt.Errorf("toolbox: the worker binary: %w", err)
	}
	if !st.Mode().IsRegular() || st.Size() == 0 || st.Size() > maxWorker {
		return Worker{}, fmt.Errorf("toolbox: the worker binary %s is not a regular file of 1 byte to %d MiB", p, maxWorker>>20)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxWorker+1))
	if err != nil {
		return Worker{}, fmt.Errorf("toolbox: reading the worker binary: %w", err)
	}
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return Worker{}, fmt.Errorf("toolbox: the worker binary %s is not an ELF executable: %v", p, err)
	}
	defer ef.Close()
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return Worker{}, fmt.Errorf("toolbox: the worker binary %s is not an executable (%v)", p, ef.Type)
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			return Worker{}, fmt.Errorf("toolbox: the worker binary %s is dynamically linked; build it with CGO_ENABLED=0 (make build)", p)
		}
	}
	sum := sha256.Sum256(data)
	return Worker{Data: data, SHA256: hex.EncodeToString(sum[:]), Path: p}, nil
}

// FileSHA256 is the hex sha256 of a file (the host's worker, for doctor).
func FileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, maxWorker+1)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ImportOptions describe an import.
type ImportOptions struct {
	// BaseTar is the root filesystem tar (BuildBase's, or a kept one).
	BaseTar string
	// Worker is the sandbox-worker binary to append (ReadWorker).
	Worker Worker
	// Tag is the image reference ("name:tag"), config runs.image.
	Tag string
}

// maxImportOutput bounds the daemon's progress stream read by Import.
const maxImportOutput = 1 << 20

// labelValueRe: what may go between a LABEL change's double quotes.
var labelValueRe = regexp.MustCompile(`^[A-Za-z0-9=.,+~:_-]*$`)

// Changes are the Dockerfile-style instructions Import applies: the
// image's working directory, environment, command and labels.
func Changes(workerSHA256, packages string) ([]string, error) {
	cmd, err := json.Marshal([]string{layout.ToolboxWorker, "run-supervise"})
	if err != nil {
		return nil, err
	}
	out := []string{
		"WORKDIR " + WorkDir,
		"ENV PATH=" + PathEnv,
		"ENV LANG=" + LangEnv,
		"CMD " + string(cmd),
	}
	for _, l := range [][2]string{{LabelWorkerSHA256, workerSHA256}, {LabelPackages, packages}, {LabelVersion, version.Version}} {
		if l[1] == "" {
			continue
		}
		if !labelValueRe.MatchString(l[1]) {
			return nil, fmt.Errorf("toolbox: label %s value %q holds characters a LABEL change cannot carry", l[0], l[1])
		}
		out = append(out, fmt.Sprintf("LABEL %s=%q", l[0], l[1]))
	}
	return out, nil
}

// Import streams o.BaseTar with the worker appended at
// layout.ToolboxWorker into Docker (POST /images/create?fromSrc=-) under
// o.Tag, with Changes applied. The base is read twice: a first pass
// refuses a base holding the worker's path (ErrBaseHoldsWorker) and reads
// PackagesFile for the label, before Docker receives anything; the second
// pass streams. The rootfs never lands on disk as a tree on this side.
func Import(ctx context.Context, d Docker, o ImportOptions) (Image, error) {
	if len(o.Worker.Data) == 0 || o.Worker.SHA256 == "" {
		return Image{}, errors.New("toolbox: no worker binary (ReadWorker)")
	}
	if o.Tag == "" {
		return Image{}, errors.New("toolbox: no image tag")
	}
	f, err := os.Open(o.BaseTar)
	if err != nil {
		return Image{}, fmt.Errorf("toolbox: the base tar: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return Image{}, fmt.Errorf("toolbox: the base tar %s is not a regular file", o.BaseTar)
	}
	scan, err := copyBase(nil, f)
	if err != nil {
		return Image{}, err
	}
	packages := ""
	if scan.packages != "" {
		if packages, err = packagesLabel(scan.packages); err != nil {
			return Image{}, err
		}
	}
	changes, err := Changes(o.Worker.SHA256, packages)
	if err != nil {
		return Image{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Image{}, fmt.Errorf("toolbox: the base tar: %w", err)
	}
	mtime := timeNow()
	if st, err := os.Stat(o.Worker.Path); err == nil {
		mtime = st.ModTime()
	}

	pr, pw := io.Pipe()
	streamErr := make(chan error, 1)
	go func() {
		err := appendWorker(pw, f, o.Worker.Data, mtime)
		pw.CloseWithError(err)
		streamErr <- err
	}()
	importErr := func() error {
		defer pr.Close() // unblocks the writer when Docker stopped reading
		rc, err := d.ImageImport(ctx, image.ImportSource{Source: pr, SourceName: "-"}, o.Tag,
			image.ImportOptions{Message: "sandbox-host toolbox build", Changes: changes})
		if err != nil {
			return fmt.Errorf("toolbox: docker import: %w", err)
		}
		defer rc.Close()
		return readImportStream(rc)
	}()
	serr := <-streamErr
	switch {
	case serr != nil && errors.Is(serr, io.ErrClosedPipe) && importErr != nil:
		return Image{}, importErr // Docker stopped reading: its reason
	case serr != nil:
		return Image{}, serr // the cause; Docker only saw a cut stream
	case importErr != nil:
		return Image{}, importErr
	}
	img, err := Inspect(ctx, d, o.Tag)
	if err != nil {
		return Image{}, err
	}
	if img.WorkerSHA256 != o.Worker.SHA256 {
		return Image{}, fmt.Errorf("toolbox: imported %s carries worker label %q, want %s", o.Tag, img.WorkerSHA256, o.Worker.SHA256)
	}
	return img, nil
}

// readImportStream reads the daemon's JSON messages (bounded) and returns
// the first error one carries.
func readImportStream(r io.Reader) error {
	dec := json.NewDecoder(io.LimitReader(r, maxImportOutput))
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("toolbox: docker import output: %w", err)
		}
		if msg.Error != nil {
			return fmt.Errorf("toolbox: docker import: %s", msg.Error.Message)
		}
		if msg.ErrorMessage != "" { //nolint:staticcheck // older daemons set only this
			return fmt.Errorf("toolbox: docker import: %s", msg.ErrorMessage) //nolint:staticcheck
		}
	}
}

// ErrAbsent: no image of that reference.
var ErrAbsent = errors.New("toolbox image not present")

// Inspect describes the image tag names; ErrAbsent when there is none.
func Inspect(ctx context.Context, d Docker, tag string) (Image, error) {
	resp, err := d.ImageInspect(ctx, tag)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return Image{}, fmt.Errorf("toolbox: %s: %w", tag, ErrAbsent)
		}
		return Image{}, fmt.Errorf("toolbox: docker image inspect %s: %w", tag, err)
	}
	img := Image{Tag: tag, ID: resp.ID, Size: resp.Size}
	if resp.Config != nil {
		img.WorkerSHA256 = resp.Config.Labels[LabelWorkerSHA256]
		img.Packages = resp.Config.Labels[LabelPackages]
		img.Version = resp.Config.Labels[LabelVersion]
		img.WorkDir = resp.Config.WorkingDir
		img.Cmd = resp.Config.Cmd
	}
	return img, nil
}

// PackageList splits LabelPackages' value into its name=version items.
func (i Image) PackageList() []string {
	if i.Packages == "" {
		return nil
	}
	return strings.Split(i.Packages, ",")
}
