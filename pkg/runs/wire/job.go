// Package wire is the contract between the host and a run's container: the
// Job the host writes on the container's stdin (one JSON object, one line)
// and the frames the in-container supervisor writes on its stdout (output
// chunks, phase ends, artifacts, one result). It imports only the standard
// library: both the host and the static in-container binary carry it.
//
// Guarantee: a Job that ReadJob returns passed Validate; every frame the
// Decoder returns respects the Limits it was given, and any stream that
// leaves them (or the framing) ends in an error wrapping ErrProtocol.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"
)

// Bounds of the job and of paths.
const (
	// MaxJobBytes bounds the job JSON on stdin, newline included.
	MaxJobBytes = 1 << 20
	// MaxArtifactPathBytes bounds an artifact path (PATH_MAX), and
	// MaxArtifactNameBytes each of its components (NAME_MAX).
	MaxArtifactPathBytes = 4096
	MaxArtifactNameBytes = 255
)

// The container layout of a run with setup (DESIGN.md section 12). Setup
// runs as root, and root owns (so reads) a project's root-owned files
// whatever their mode: the project is therefore bound at SetupProjectPath,
// inside the gate SetupGatePath, a read-only bind of a host directory that
// belongs to the main command's uid:gid, mode 0700. Setup commands (root,
// in no group but root's) hold no capability that passes it (no
// DAC_OVERRIDE, DAC_READ_SEARCH, SETUID or SETGID; CHOWN and FOWNER meet a
// read-only mount), so they cannot reach the project at all; once setup
// ended, the supervisor makes /workspace a symlink to SetupProjectPath for
// the main command, which passes the gate as its owner.
const (
	SetupGatePath    = "/.workspace-gate"
	SetupProjectPath = SetupGatePath + "/workspace"
)

// ErrInvalidJob is the category of every Job refusal.
var ErrInvalidJob = errors.New("invalid run job")

// Job is what the host asks of a run's container: setup commands as root,
// then exactly one main command (Command through /bin/sh -c, or Argv with
// Argv[0] looked up in PATH) as UID:GID, then the artifacts to send back.
type Job struct {
	// Setup commands run in order as root through /bin/sh -c; the first
	// that exits non-zero ends the run.
	Setup []string `json:"setup,omitempty"`
	// Command is the shell mode's command; Argv the argv mode's.
	Command string   `json:"command,omitempty"`
	Argv    []string `json:"argv,omitempty"`
	// UID and GID run the main command (both > 0; no supplementary groups).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Proxy starts the egress bridge and points the proxy variables at it.
	Proxy bool `json:"proxy,omitempty"`
	// Placeholders: the run has credentials (each with a variable); the
	// supervisor reads their placeholders and the run CA from the broker
	// (RunEnvPath) before any command. Only with Proxy.
	Placeholders bool `json:"placeholders,omitempty"`
	// Artifacts are cleaned relative paths under the output directory.
	Artifacts []string `json:"artifacts,omitempty"`
	// MaxOutputBytes bounds stdout and stderr each (setup and main
	// together); output past it is read and dropped.
	MaxOutputBytes        int   `json:"maxOutputBytes"`
	MaxArtifactBytes      int64 `json:"maxArtifactBytes"`
	MaxArtifactTotalBytes int64 `json:"maxArtifactTotalBytes"`
}

// Validate refuses a job that names both modes or neither, a uid or gid of
// 0 or less, a bound of 0 or less, text that is not UTF-8 or carries NUL
// (neither survives an argv), and an artifact path ValidArtifactPath refuses.
func (j Job) Validate() error {
	hasCmd, hasArgv := j.Command != "", len(j.Argv) > 0
	switch {
	case hasCmd && hasArgv:
		return invalidJob("both command and argv are set")
	case !hasCmd && !hasArgv:
		return invalidJob("neither command nor argv is set")
	}
	if err := plain("command", j.Command); err != nil {
		return err
	}
	if hasArgv && j.Argv[0] == "" {
		return invalidJob("argv[0] is empty")
	}
	for i, a := range j.Argv {
		if err := plain(fmt.Sprintf("argv[%d]", i), a); err != nil {
			return err
		}
	}
	for i, s := range j.Setup {
		if s == "" {
			return invalidJob(fmt.Sprintf("setup[%d] is empty", i))
		}
		if err := plain(fmt.Sprintf("setup[%d]", i), s); err != nil {
			return err
		}
	}
	if j.UID <= 0 || j.GID <= 0 {
		return invalidJob(fmt.Sprintf("uid and gid must be > 0, got %d:%d", j.UID, j.GID))
	}
	if j.MaxOutputBytes <= 0 || j.MaxArtifactBytes <= 0 || j.MaxArtifactTotalBytes <= 0 {
		return invalidJob("maxOutputBytes, maxArtifactBytes and maxArtifactTotalBytes must be > 0")
	}
	if j.Placeholders && !j.Proxy {
		return invalidJob("placeholders need proxy")
	}
	for i, a := range j.Artifacts {
		if err := ValidArtifactPath(a); err != nil {
			return invalidJob(fmt.Sprintf("artifacts[%d]: %v", i, err))
		}
	}
	return nil
}

// MaxCredentialedHosts bounds a run's credentials (policy's bound), so
// its RunEnv's variables.
const MaxCredentialedHosts = 16

func invalidJob(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidJob, msg) }

func plain(name, s string) error {
	if !utf8.ValidString(s) {
		return invalidJob(name + " is not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return invalidJob(name + " contains a NUL byte")
	}
	return nil
}

// ValidArtifactPath accepts a clean relative path (path.Clean leaves it
// unchanged) with no "." or ".." component, no NUL, at most
// MaxArtifactPathBytes long with components of at most MaxArtifactNameBytes.
func ValidArtifactPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case len(p) > MaxArtifactPathBytes:
		return fmt.Errorf("path longer than %d bytes", MaxArtifactPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("path contains a NUL byte")
	case !utf8.ValidString(p):
		return errors.New("path is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return errors.New("absolute path")
	case path.Clean(p) != p:
		return errors.New("path is not clean")
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "." || c == "..":
			return errors.New("path has a . or .. component")
		case len(c) > MaxArtifactNameBytes:
			return fmt.Errorf("path component longer than %d bytes", MaxArtifactNameBytes)
		}
	}
	return nil
}

// WriteJob validates j and writes it as one JSON line.
func WriteJob(w io.Writer, j Job) error {
	if err := j.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if len(b) > MaxJobBytes {
		return invalidJob(fmt.Sprintf("job is %d bytes encoded, over %d", len(b), MaxJobBytes))
	}
	_, err = w.Write(b)
	return err
}

// ReadJob reads one job line (at most MaxJobBytes; a job may also end at
// EOF) and returns it validated. It never reads past the newline, so the
// caller need not close its side of stdin. Unknown fields, a second value
// and trailing bytes are refused.
func ReadJob(r io.Reader) (Job, error) {
	line, err := readLine(r, MaxJobBytes)
	if err != nil {
		return Job{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var j Job
	if err := dec.Decode(&j); err != nil {
		return Job{}, invalidJob("not a job JSON object: " + err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return Job{}, invalidJob("trailing data after the job object")
	}
	if err := j.Validate(); err != nil {
		return Job{}, err
	}
	return j, nil
}

// readLine reads byte by byte up to and excluding '\n' (which counts
// towards max), or to EOF. A reader that is not an io.ByteReader is read
// one byte at a time, so nothing after the line is consumed; wrap it in a
// bufio.Reader when what follows does not matter.
func readLine(r io.Reader, max int) ([]byte, error) {
	var br io.ByteReader
	if b, ok := r.(io.ByteReader); ok {
		br = b
	} else {
		br = &oneByteReader{r: r}
	}
	var buf []byte
	for {
		c, err := br.ReadByte()
		if err == io.EOF {
			if len(buf) == 0 {
				return nil, invalidJob("no job before end of input")
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf)+1 > max {
			return nil, invalidJob(fmt.Sprintf("job over %d bytes", max))
		}
		if c == '\n' {
			return buf, nil
		}
		buf = append(buf, c)
	}
}

type oneByteReader struct {
	r io.Reader
	b [1]byte
}

func (o *oneByteReader) ReadByte() (byte, error) {
	for {
		n, err := o.r.Read(o.b[:])
		if n == 1 {
			return o.b[0], nil
		}
		if err != nil {
			return 0, err
		}
	}
}
