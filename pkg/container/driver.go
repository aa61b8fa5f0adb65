// Package container drives the Docker Engine API for one-shot worker
// containers. Guarantee: every container it creates matches DESIGN.md section
// 4 (no network, read-only root, no capabilities, no-new-privileges, a
// non-root uid:gid, bounded memory/CPU/PIDs/tmpfs, exactly two rprivate bind
// mounts, no log driver: stderr leaves only through RunLogged, no host environment); images are never pulled;
// a worker's stdout is read bounded from the attach stream only; and when a
// caller's context ends the container is SIGKILLed, never waited for.
package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Error categories (wrapped last with %w).
var (
	// ErrImageMissing: the image is not present; the driver never pulls.
	ErrImageMissing = errors.New("container image not present")
	// ErrConflict: a container of that name already exists.
	ErrConflict = errors.New("container name in use")
	// ErrUnsupportedHost: the daemon address is not a local Unix socket.
	ErrUnsupportedHost = errors.New("unsupported docker host")
	// ErrDaemon: the Docker daemon failed a request.
	ErrDaemon = errors.New("docker daemon request failed")
	// ErrTooLarge: stdin over MaxStdin.
	ErrTooLarge = errors.New("input too large")
)

// CleanupTimeout bounds each Kill and Remove (DESIGN.md section 3 step 8).
const CleanupTimeout = 5 * time.Second

// MaxStdin bounds what Run writes to a worker: one turn JSON.
const MaxStdin = protocol.MaxTurnBytes

// maxLoadOutput bounds the daemon's progress stream read by LoadImage.
const maxLoadOutput = 1 << 20

// defaultSockets are host paths of a Docker socket that never go into a bind
// mount, whatever the configured daemon address is.
var defaultSockets = []string{"/run/docker.sock", "/var/run/docker.sock"}

// Result is the outcome of one Run.
type Result struct {
	// Stdout is at most maxStdout bytes of the worker's stdout.
	Stdout []byte
	// ExitCode is the container's exit status (-1 when unknown).
	ExitCode int64
	// Truncated: the worker wrote more than maxStdout bytes and was killed.
	Truncated bool
	// StderrRefused: the stderr writer refused more (its bound) and the
	// worker was killed.
	StderrRefused bool
	// Framed: the run returned at the worker's final frame (FinishFramed):
	// Stdout is that frame, ExitCode is -1 and the container may still be
	// running; the caller's cleanup kills and removes it.
	Framed bool
	// Tail, set when Framed, waits until the worker's streams are read to
	// their end after the frame (or cut at FrameDrainGrace) and says what
	// came after the frame that does not belong (more stdout, a refused
	// stderr, a cut). The stderr writer is written until it returns, so the
	// caller closes that writer, and kills the container, only after it.
	// It may be called more than once.
	Tail func() error
}

// Info describes one listed container.
type Info struct {
	ID, Name string
	Labels   map[string]string
	// Created has one-second resolution (the list API's granularity).
	Created time.Time
	State   string
}

// PhaseFunc observes how long each phase of Run took.
type PhaseFunc func(phase string, took time.Duration)

// Phases reported to Driver.Observe.
const (
	PhaseAttach = "container_attach"
	PhaseStart  = "container_start"
	PhaseRun    = "worker_run"
	PhaseWait   = "container_wait"
	// PhaseFrameDrain: from a worker's accepted final frame to the return
	// (FrameDrainGrace, or the streams' end): FinishFramed's only wait
	// after the reply.
	PhaseFrameDrain = "frame_drain"
)

// Driver talks to one local Docker daemon.
type Driver struct {
	// Observe, when set, is called after each phase of Run.
	Observe PhaseFunc

	cli     *client.Client
	sockets []string
	// logDriver replaces journald only in this package's integration tests
	// and benchmark, on a development daemon that has no journald (its
	// containers then fail to start). Production code cannot set it.
	logDriver string
}

// New connects to host ("" = DOCKER_HOST or the default socket). Only local
// unix:// daemons are accepted: bind-mount sources are paths of this machine.
// The API version is negotiated (Debian 12's dockerd serves 1.41).
func New(host string) (*Driver, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %v: %w", err, ErrDaemon)
	}
	u, err := url.Parse(cli.DaemonHost())
	if err != nil || u.Scheme != "unix" || u.Path == "" || !filepath.IsAbs(u.Path) {
		cli.Close()
		return nil, fmt.Errorf("docker host %q: only unix:///absolute/path is allowed: %w", cli.DaemonHost(), ErrUnsupportedHost)
	}
	socks := append([]string{filepath.Clean(u.Path)}, defaultSockets...)
	if real, err := filepath.EvalSymlinks(u.Path); err == nil {
		socks = append(socks, real)
	}
	return &Driver{cli: cli, sockets: socks}, nil
}

// Close releases the client's connections.
func (d *Driver) Close() error { return d.cli.Close() }

func (d *Driver) observe(phase string, since time.Time) time.Time {
	now := time.Now()
	if d.Observe != nil {
		d.Observe(phase, now.Sub(since))
	}
	return now
}

func daemonErr(op string, err error) error {
	return fmt.Errorf("%s: %v: %w", op, err, ErrDaemon)
}

// Ping checks that the daemon answers.
func (d *Driver) Ping(ctx context.Context) error {
	if _, err := d.cli.Ping(ctx); err != nil {
		return daemonErr("docker ping", err)
	}
	return nil
}

// ImagePresent reports whether ref exists locally.
func (d *Driver) ImagePresent(ctx context.Context, ref string) (bool, error) {
	if _, err := d.cli.ImageInspect(ctx, ref); err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, daemonErr("image inspect", err)
	}
	return true, nil
}

// Runtimes lists the OCI runtimes registered with the daemon, each with the
// arguments the daemon passes to it (daemon.json's runtimeArgs).
func (d *Driver) Runtimes(ctx context.Context) (map[string][]string, error) {
	info, err := d.cli.Info(ctx)
	if err != nil {
		return nil, daemonErr("docker info", err)
	}
	out := make(map[string][]string, len(info.Runtimes))
	for name, r := range info.Runtimes {
		out[name] = r.Args
	}
	return out, nil
}

// LoadImage loads a docker-archive tar (docker load).
func (d *Driver) LoadImage(ctx context.Context, archivePath string) error {
	f, err := os.Open(archivePath)
	if err != nil {
		return fmt.Errorf("open image archive: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("image archive %s is not a regular file", archivePath)
	}
	resp, err := d.cli.ImageLoad(ctx, f, client.ImageLoadWithQuiet(true))
	if err != nil {
		return daemonErr("image load", err)
	}
	defer resp.Body.Close()
	// The load's outcome is in the JSON message stream, not the status code.
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxLoadOutput))
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return daemonErr("image load output", err)
		}
		if msg.Error != nil {
			return daemonErr("image load", msg.Error)
		}
		if msg.ErrorMessage != "" { //nolint:staticcheck // older daemons set only this
			return daemonErr("image load", errors.New(msg.ErrorMessage)) //nolint:staticcheck
		}
	}
}

// Create validates spec and creates (does not start) its container. The image
// must already exist. When ctx ends during the request, the daemon may still
// create the container: Create then removes it by name a few times over about
// 1.25 s, and the caller should remove spec.Name once more (the create/attach
// race). Remove accepts the name as well as the id.
func (d *Driver) Create(ctx context.Context, spec Spec) (string, error) {
	if err := spec.Validate(d.sockets...); err != nil {
		return "", err
	}
	cfg, host := spec.configs(d.logDriver)
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, spec.Name)
	if err != nil {
		if ctx.Err() != nil {
			return "", errors.Join(fmt.Errorf("container create: %w", ctx.Err()), d.settleAbandonedCreate(ctx, spec.Name, cfg, host))
		}
		switch {
		case cerrdefs.IsNotFound(err):
			return "", fmt.Errorf("container create: image %s: %w", spec.Image, ErrImageMissing)
		case cerrdefs.IsConflict(err):
			return "", fmt.Errorf("container create %s: %w", spec.Name, ErrConflict)
		}
		return "", daemonErr("container create", err)
	}
	return resp.ID, nil
}

// Run attaches to stdin, stdout and stderr (stderr discarded), starts the
// container, writes stdin and closes it, copies at most maxStdout bytes of
// stdout and waits for exit. A worker writing more than maxStdout is killed
// and the result is Truncated. When ctx ends first, the container is
// SIGKILLed and the error wraps ctx.Err(). Run never removes the container.
func (d *Driver) Run(ctx context.Context, id string, stdin []byte, maxStdout int64) (Result, error) {
	return d.RunGated(ctx, id, stdin, maxStdout, nil)
}

// ErrNotReady wraps the error of RunGated's ready func.
var ErrNotReady = errors.New("container run: not ready for stdin")

// RunGated is Run with a gate on stdin: ready (nil = none) is called once
// the container started and before any byte of stdin is written, so the
// container's start can overlap whatever the worker's input depends on (the
// broker units). The worker reads its turn from stdin first, so it can do
// nothing before ready returned nil. A non-nil error from ready, or ctx
// ending while it runs, SIGKILLs the container; the error wraps ready's
// error and ErrNotReady (or ctx.Err()). The container is never removed here.
func (d *Driver) RunGated(ctx context.Context, id string, stdin []byte, maxStdout int64, ready func(context.Context) error) (Result, error) {
	return d.RunLogged(ctx, id, stdin, maxStdout, ready, nil)
}

// RunLogged is RunGated with the worker's stderr copied to stderr (nil:
// discarded): the container has no log driver, so this is the only way its
// stderr leaves it, and the caller bounds it. A Write error from stderr
// stops the copy and SIGKILLs the container; the result is StderrRefused.
func (d *Driver) RunLogged(ctx context.Context, id string, stdin []byte, maxStdout int64, ready func(context.Context) error, stderr io.Writer) (Result, error) {
	return d.RunFramed(ctx, id, stdin, maxStdout, ready, stderr, nil)
}

// RunFramed is RunLogged that returns at the worker's final frame when
// accept takes it (FinishFramed); nil accept is RunLogged.
func (d *Driver) RunFramed(ctx context.Context, id string, stdin []byte, maxStdout int64, ready func(context.Context) error, stderr io.Writer, accept func(frame []byte) bool) (Result, error) {
	res := Result{ExitCode: -1}
	if err := checkRun(stdin, maxStdout); err != nil {
		return res, err
	}
	s, err := d.Start(ctx, id)
	if err != nil {
		return res, err
	}
	defer s.Close()
	if ready != nil {
		if err := ready(ctx); err != nil {
			if ctx.Err() != nil {
				return res, s.abort(ctx, "container run: waiting to write stdin")
			}
			s.hj.Close()
			return res, errors.Join(fmt.Errorf("%w: %w", ErrNotReady, err), d.killDetached(ctx, id))
		}
		if ctx.Err() != nil {
			return res, s.abort(ctx, "container run: waiting to write stdin")
		}
	}
	// The wait at the gate is the caller's to report (the host's
	// "stdin_gate" phase); it is kept out of PhaseRun.
	return s.FinishFramed(ctx, stdin, maxStdout, stderr, accept)
}

func checkRun(stdin []byte, maxStdout int64) error {
	if maxStdout <= 0 {
		return errors.New("container run: maxStdout must be positive")
	}
	if len(stdin) > MaxStdin {
		return fmt.Errorf("container run: stdin over %d bytes: %w", MaxStdin, ErrTooLarge)
	}
	return nil
}

// Started is a container attached (stdin, stdout, stderr) and started whose
// worker has not been given its stdin yet: it is blocked reading it. Finish
// gives it; Close (always, after Finish or instead of it) drops the attach
// connection. Started never removes the container.
type Started struct {
	d  *Driver
	id string
	hj types.HijackedResponse
	// tailing: FinishFramed returned at a frame and its tail reads on;
	// the tail closes the connection, Close leaves it.
	tailing atomic.Bool
}

// Start attaches to the container and starts it (the first half of
// RunLogged). On any error the attach connection is closed, and when ctx
// ended during the start request the container is SIGKILLed (the daemon may
// have started it regardless).
func (d *Driver) Start(ctx context.Context, id string) (*Started, error) {
	t := time.Now()
	hj, err := d.cli.ContainerAttach(ctx, id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("container attach: %w", ctx.Err())
		}
		return nil, daemonErr("container attach", err)
	}
	t = d.observe(PhaseAttach, t)
	s := &Started{d: d, id: id, hj: hj}
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		if ctx.Err() != nil {
			return nil, s.abort(ctx, "container start")
		}
		hj.Close()
		return nil, daemonErr("container start", err)
	}
	d.observe(PhaseStart, t)
	return s, nil
}

// Close drops the attach connection (idempotent), unless FinishFramed's
// tail still reads it: the tail drops it at the streams' end or its bound.
func (s *Started) Close() {
	if !s.tailing.Load() {
		s.hj.Close()
	}
}

// abort: once nobody reads, the attach connection must be closed before a
// kill: a worker still writing would otherwise block the daemon's stream
// copy, and with it the kill, until the cleanup bound.
func (s *Started) abort(ctx context.Context, op string) error {
	s.hj.Close()
	return errors.Join(fmt.Errorf("%s: %w", op, ctx.Err()), s.d.killDetached(ctx, s.id))
}

// Running reports whether the container is running now (inspect): a
// standby's check at bind time. A missing container is not running.
func (d *Driver) Running(ctx context.Context, id string) (bool, error) {
	info, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, daemonErr("container inspect", err)
	}
	return info.State != nil && info.State.Running, nil
}

// Finish writes stdin and closes it, copies at most maxStdout bytes of
// stdout (and stderr to stderr, nil: discarded) and waits for exit, as the
// second half of RunLogged. It may be called once.
func (s *Started) Finish(ctx context.Context, stdin []byte, maxStdout int64, stderr io.Writer) (Result, error) {
	return s.FinishFramed(ctx, stdin, maxStdout, stderr, nil)
}

// FrameDrainGrace bounds how long a framed run's tail still reads a
// worker's streams after its final frame, for log lines it wrote before
// that frame that Docker's separate stream copies deliver after it. The
// tail reads to the streams' end, about 35 ms after the frame
// (TestIntegrationFinishFramed), and cuts only a worker that keeps its
// streams open past the bound: a 5 ms grace lost a quiet channel's lines
// while another channel flooded its log (e2e TestLogFloodLeavesOtherChannels),
// and a log line is owed. The reply does not wait for it (Result.Tail).
var FrameDrainGrace = 2 * time.Second

// FinishFramed is Finish for a worker whose last act is one final frame on
// stdout: a line ending in the first newline it writes (a sealed turn's
// reply, pkg/protocol). When stdout so far is exactly such a line and
// accept (nil: never) takes it, it returns Framed at once, without waiting
// for the rest of the worker's streams, its exit or Docker's wait, which
// the reply does not need (docs/sealed-turns.md, "The reply leaves before
// the cleanup"): the streams are read on in the background to their end or
// FrameDrainGrace, then the attach connection is closed; Result.Tail waits
// for that and the caller's cleanup (after Tail) kills and removes the
// container, exited or not. Anything else (a frame accept refuses, no
// newline) is read and awaited as Finish does.
func (s *Started) FinishFramed(ctx context.Context, stdin []byte, maxStdout int64, stderr io.Writer, accept func(frame []byte) bool) (Result, error) {
	d, id, hj := s.d, s.id, s.hj
	res := Result{ExitCode: -1}
	if err := checkRun(stdin, maxStdout); err != nil {
		s.hj.Close()
		return res, errors.Join(err, d.killDetached(ctx, id))
	}
	if stderr == nil {
		stderr = io.Discard
	}
	t := time.Now()
	go func() {
		// A worker that never reads stdin blocks this write; hj.Close ends it.
		if _, err := hj.Conn.Write(stdin); err == nil {
			_ = hj.CloseWrite()
		}
	}()
	out := &boundedWriter{max: maxStdout, accept: accept, framed: make(chan []byte, 1)}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, &refusingWriter{w: stderr}, hj.Reader)
		copied <- err
	}()
	var err error
	select {
	case <-ctx.Done():
		return res, s.abort(ctx, "container run")
	case frame := <-out.framed:
		// The reply is whole: it leaves now. The worker's last stderr lines
		// may still be on their way (the daemon copies the two streams
		// apart), so the tail reads on, and the caller waits for it
		// (Result.Tail) before it closes the stderr writer.
		d.observe(PhaseRun, t)
		s.tailing.Store(true)
		tail := make(chan error, 1)
		go func() { tail <- s.tail(out, len(frame), copied, time.Now()) }()
		var once sync.Once
		var tailErr error
		res.Stdout, res.Framed = frame, true
		res.Tail = func() error {
			once.Do(func() { tailErr = <-tail })
			return tailErr
		}
		return res, nil
	case err = <-copied:
	}
	t = d.observe(PhaseRun, t)
	res.Stdout = out.buf
	if errors.Is(err, errStderrRefused) {
		res.StderrRefused = true
		hj.Close()
		if kerr := d.killDetached(ctx, id); kerr != nil {
			return res, fmt.Errorf("container run: stderr refused, kill: %w", kerr)
		}
		// The exit status is of the kill; the caller fails the turn.
		return res, nil
	}
	if errors.Is(err, errStdoutLimit) {
		res.Truncated = true
		hj.Close()
		if kerr := d.killDetached(ctx, id); kerr != nil {
			return res, fmt.Errorf("container run: stdout over %d bytes, kill: %w", maxStdout, kerr)
		}
	} else if err != nil {
		hj.Close()
		kerr := d.killDetached(ctx, id)
		return res, errors.Join(daemonErr("container stdout", err), kerr)
	}

	waitc, errc := d.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case <-ctx.Done():
		return res, s.abort(ctx, "container wait")
	case err := <-errc:
		if ctx.Err() != nil {
			return res, s.abort(ctx, "container wait")
		}
		kerr := d.killDetached(ctx, id)
		return res, errors.Join(daemonErr("container wait", err), kerr)
	case w := <-waitc:
		if w.Error != nil && w.Error.Message != "" {
			return res, daemonErr("container wait", errors.New(w.Error.Message))
		}
		res.ExitCode = w.StatusCode
	}
	d.observe(PhaseWait, t)
	return res, nil
}

// tail reads a framed run's streams after its frame (frameLen bytes of
// stdout) to their end or FrameDrainGrace, closes the attach connection
// and says what came after the frame that does not belong.
func (s *Started) tail(out *boundedWriter, frameLen int, copied <-chan error, framedAt time.Time) error {
	grace := time.NewTimer(FrameDrainGrace)
	defer grace.Stop()
	var err error
	cut := false
	select {
	case err = <-copied:
	case <-grace.C:
		s.hj.Close() // nothing writes to stderr's writer once the copy ended
		<-copied
		cut = true
	}
	s.hj.Close()
	s.d.observe(PhaseFrameDrain, framedAt)
	switch {
	case len(out.buf) != frameLen: // out is the copy's, which has ended
		return fmt.Errorf("container run: %d more bytes of stdout after the final frame", len(out.buf)-frameLen)
	case cut:
		return fmt.Errorf("container run: streams still open %v after the final frame, cut", FrameDrainGrace)
	case errors.Is(err, errStderrRefused):
		return fmt.Errorf("container run: stderr refused after the final frame: %w", err)
	case err != nil:
		return daemonErr("container stdout after the final frame", err)
	}
	return nil
}

// killDetached kills with a fresh CleanupTimeout bound: the caller's ctx may
// already be over, and cleanup must still happen.
func (d *Driver) killDetached(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	return d.Kill(cctx, id)
}

func (d *Driver) removeDetached(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	return d.Remove(cctx, id)
}

// settleAbandonedCreate leaves nothing of a create whose request was
// abandoned (ctx ended during it): the daemon may go on creating name after
// the client went away, so a removal alone can come before the container
// exists and leave an orphan. The synchronisation point is the name itself:
// dockerd reserves a container's name atomically, so a create of our own
// under that name either conflicts (the abandoned create holds it: remove
// that and claim again) or succeeds (the abandoned create can no longer
// land); ours is then removed. Each round is two daemon round trips; the
// whole is bounded by CleanupTimeout, past which a created (never started)
// orphan is left to the reaper, which removes it once its deadline label
// has passed.
func (d *Driver) settleAbandonedCreate(ctx context.Context, name string, cfg *container.Config, host *container.HostConfig) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	for {
		if err := d.Remove(cctx, name); err != nil {
			return err
		}
		_, err := d.cli.ContainerCreate(cctx, cfg, host, nil, nil, name)
		switch {
		case err == nil:
			return d.Remove(cctx, name)
		case cerrdefs.IsConflict(err) && cctx.Err() == nil:
			// The abandoned create holds the name: it is removed on the
			// next round, once it is a container.
		case cerrdefs.IsNotFound(err):
			return nil // no image: no create can make a container of it
		default:
			return daemonErr("container create claim", err)
		}
	}
}

// Kill sends SIGKILL. A missing or stopped container counts as success.
// The call is bounded by CleanupTimeout unless ctx ends sooner.
func (d *Driver) Kill(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	if err := d.cli.ContainerKill(ctx, id, "KILL"); err != nil {
		// 409 Conflict is "container is not running".
		if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
			return nil
		}
		return daemonErr("container kill", err)
	}
	return nil
}

// Remove force-removes id (name or id) with its anonymous volumes. A missing
// container counts as success. Bounded by CleanupTimeout unless ctx ends
// sooner: pass a cleanup context, not an expired turn context.
func (d *Driver) Remove(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
	defer cancel()
	err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return daemonErr("container remove", err)
	}
	return nil
}

// List returns every container (all states) labelled with installation.
func (d *Driver) List(ctx context.Context, installation string) ([]Info, error) {
	if installation == "" {
		return nil, errors.New("container list: installation is empty")
	}
	f := filters.NewArgs(filters.Arg("label", layout.LabelInstallation+"="+installation))
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, daemonErr("container list", err)
	}
	infos := make([]Info, 0, len(list))
	for _, c := range list {
		// The filter is the daemon's; check again so a daemon bug or an
		// unexpected label form cannot hand another installation's container.
		if c.Labels[layout.LabelInstallation] != installation {
			continue
		}
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		infos = append(infos, Info{
			ID:      c.ID,
			Name:    name,
			Labels:  c.Labels,
			Created: time.Unix(c.Created, 0),
			State:   string(c.State),
		})
	}
	return infos, nil
}

var (
	errStdoutLimit   = errors.New("stdout limit reached")
	errStderrRefused = errors.New("stderr refused")
)

// refusingWriter tells the caller's stderr errors apart from stdout's.
type refusingWriter struct{ w io.Writer }

func (r *refusingWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil {
		return n, fmt.Errorf("%w: %w", errStderrRefused, err)
	}
	return n, nil
}

// boundedWriter keeps at most max bytes and fails the write that exceeds it,
// which stops stdcopy at once. With accept, the first newline is looked at
// once: when it ends what was written so far and accept takes that line, a
// copy of it is sent on framed (FinishFramed).
type boundedWriter struct {
	buf     []byte
	max     int64
	accept  func([]byte) bool
	framed  chan []byte
	checked bool
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	room := w.max - int64(len(w.buf))
	if int64(len(p)) > room {
		w.buf = append(w.buf, p[:room]...)
		return int(room), errStdoutLimit
	}
	w.buf = append(w.buf, p...)
	if w.accept != nil && !w.checked {
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.checked = true
			if i == len(w.buf)-1 && w.accept(w.buf) {
				w.framed <- append([]byte(nil), w.buf...)
			}
		}
	}
	return len(p), nil
}

// Stream is Finish for a code run: stdin is written and closed, stdout and
// stderr go to the caller's writers as they arrive (the caller parses and
// bounds them), then the exit status is awaited. A write error from either
// writer (the caller refusing what the container sent) stops the copy and
// kills the container; the error is returned. It may be called once.
func (s *Started) Stream(ctx context.Context, stdin []byte, stdout, stderr io.Writer) (int64, error) {
	d, id, hj := s.d, s.id, s.hj
	if err := checkRun(stdin, 1); err != nil {
		s.hj.Close()
		return -1, errors.Join(err, d.killDetached(ctx, id))
	}
	go func() {
		if _, err := hj.Conn.Write(stdin); err == nil {
			_ = hj.CloseWrite()
		}
	}()
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, hj.Reader)
		copied <- err
	}()
	select {
	case <-ctx.Done():
		return -1, s.abort(ctx, "container run")
	case err := <-copied:
		if err != nil {
			hj.Close()
			return -1, errors.Join(fmt.Errorf("container output: %w", err), d.killDetached(ctx, id))
		}
	}
	waitc, errc := d.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case <-ctx.Done():
		return -1, s.abort(ctx, "container wait")
	case err := <-errc:
		if ctx.Err() != nil {
			return -1, s.abort(ctx, "container wait")
		}
		return -1, errors.Join(daemonErr("container wait", err), d.killDetached(ctx, id))
	case w := <-waitc:
		if w.Error != nil && w.Error.Message != "" {
			return -1, daemonErr("container wait", errors.New(w.Error.Message))
		}
		return w.StatusCode, nil
	}
}

// Pause freezes every process of the container (the cgroup freezer:
// memory kept, no CPU). Resume with Unpause.
func (d *Driver) Pause(ctx context.Context, id string) error {
	if err := d.cli.ContainerPause(ctx, id); err != nil {
		return daemonErr("container pause", err)
	}
	return nil
}

// Unpause thaws a container Pause froze.
func (d *Driver) Unpause(ctx context.Context, id string) error {
	if err := d.cli.ContainerUnpause(ctx, id); err != nil {
		return daemonErr("container unpause", err)
	}
	return nil
}

// Duplex is a session's attach stream (DESIGN.md section 18): stdin stays
// open for the caller's writes, stdout and stderr are copied to its
// writers as they come.
type Duplex struct {
	s    *Started
	done chan error
}

// Duplex starts copying the started container's output to stdout and
// stderr (a Write error from either ends the copy) and returns the
// stream whose Write is the container's stdin. Done ends with the copy.
func (s *Started) Duplex(stdout, stderr io.Writer) *Duplex {
	d := &Duplex{s: s, done: make(chan error, 1)}
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, s.hj.Reader)
		d.done <- err
		close(d.done)
	}()
	return d
}

// Write writes to the container's stdin.
func (d *Duplex) Write(p []byte) (int, error) { return d.s.hj.Conn.Write(p) }

// Done ends when the output copy ended, with its error (nil at EOF).
func (d *Duplex) Done() <-chan error { return d.done }

// Close drops the attach connection: the container's stdin ends.
func (d *Duplex) Close() { d.s.Close() }
