// Package turns times whole turns three ways, interleaved so that drift in
// machine load hits every series alike: through the host API (the product),
// through `docker run --rm -i` with the same confinement (the baseline users
// compare with) and through `runc run` of a bundle (the floor). A run counts
// only when it produced a well-formed successful reply; anything else is a
// failure, counted and reported, never silently dropped.
package turns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Runner runs one turn-shaped unit of work and reports how long it took.
type Runner interface {
	Name() string
	Run(ctx context.Context, seq int) (time.Duration, error)
}

// ErrReply marks a run that finished but did not produce a good reply.
var ErrReply = errors.New("bad reply")

// Limits mirror the host's container limits (config `limits`).
type Limits struct {
	MemoryMB int64
	CPUs     float64
	Pids     int64
	TmpfsMB  int64
}

// DockerSpec is what `docker run` needs to match a turn container.
type DockerSpec struct {
	Docker     string // docker CLI path
	Image      string
	UID, GID   int
	Workspace  string // host dir bound rw at /workspace
	TurnDir    string // host dir holding broker.sock, bound ro at /run/broker
	Limits     Limits
	LogDriver  string // "journald" like the host; "none" where no journald runs
	LogTag     string
	Runtime    string // optional OCI runtime name
	NamePrefix string
	Drop       map[string]bool // flag groups left out (variants only)
}

// Flag groups of DockerArgs that a variant may drop (DockerSpec.Drop), to
// attribute docker run's cost to its parts.
const (
	GroupJournald = "journald" // --log-driver journald -> none
	GroupLimits   = "limits"   // memory, memory-swap, cpus, pids-limit
	GroupTmpfs    = "tmpfs"
	GroupBinds    = "binds"
	GroupSecurity = "security" // read-only, cap-drop, no-new-privileges, user
	GroupMeta     = "meta"     // labels, env, workdir
)

// DockerArgs is the `docker run` argv (without the CLI path) for run seq:
// the flags of DESIGN.md section 4, flag for flag, minus the groups in
// s.Drop (benchmark variants only).
func DockerArgs(s DockerSpec, seq int) []string {
	name := fmt.Sprintf("%s-%d-%d", s.NamePrefix, time.Now().UnixNano()%1e9, seq)
	args := []string{"run", "--rm", "-i", "--name", name, "--network", "none"}
	if !s.Drop[GroupSecurity] {
		args = append(args, "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
			"--user", fmt.Sprintf("%d:%d", s.UID, s.GID))
	}
	if !s.Drop[GroupLimits] {
		args = append(args,
			"--memory", fmt.Sprintf("%dm", s.Limits.MemoryMB),
			"--memory-swap", fmt.Sprintf("%dm", s.Limits.MemoryMB),
			"--cpus", strconv.FormatFloat(s.Limits.CPUs, 'f', -1, 64),
			"--pids-limit", strconv.FormatInt(s.Limits.Pids, 10))
	}
	if !s.Drop[GroupTmpfs] {
		args = append(args, "--tmpfs", fmt.Sprintf("/tmp:size=%dm,mode=1777,nosuid,nodev,noexec", s.Limits.TmpfsMB))
	}
	if !s.Drop[GroupBinds] {
		args = append(args,
			"--mount", fmt.Sprintf("type=bind,source=%s,target=%s,bind-propagation=rprivate", s.Workspace, protocol.WorkspacePath),
			"--mount", fmt.Sprintf("type=bind,source=%s,target=%s,readonly,bind-propagation=rprivate", s.TurnDir, protocol.BrokerDir))
	}
	if !s.Drop[GroupMeta] {
		args = append(args,
			"--workdir", protocol.WorkspacePath,
			"--env", protocol.EnvBrokerSocket+"="+protocol.BrokerSocketPath,
			"--env", protocol.EnvAPIKey+"="+protocol.DummyAPIKey,
			"--label", layout.LabelInstallation+"=bench",
			"--label", layout.LabelTurn+"="+ids.NewTurnID(),
			"--label", layout.LabelChannel+"=bench",
			"--label", layout.LabelDeadline+"="+strconv.FormatInt(time.Now().Add(2*time.Minute).Unix(), 10))
	}
	args = append(args, "--pull", "never")
	logDriver := s.LogDriver
	if s.Drop[GroupJournald] {
		logDriver = "none"
	}
	args = append(args, "--log-driver", logDriver)
	if logDriver == "journald" {
		args = append(args, "--log-opt", "tag="+s.LogTag)
	}
	if s.Runtime != "" {
		args = append(args, "--runtime", s.Runtime)
	}
	return append(args, s.Image)
}

// ExecRunner times one process run with Stdin as its standard input and
// requires a successful reply on its standard output.
type ExecRunner struct {
	Label string
	// Argv builds the command line of run seq.
	Argv  func(seq int) []string
	Stdin []byte
}

// Name is the series name.
func (r *ExecRunner) Name() string { return r.Label }

// Run executes the command once.
func (r *ExecRunner) Run(ctx context.Context, seq int) (time.Duration, error) {
	argv := r.Argv(seq)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(r.Stdin)
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s: %v: %s", r.Label, err, tail(errb.String()))
	}
	rep, err := protocol.DecodeReply(out.Bytes())
	if err != nil {
		return d, fmt.Errorf("%s: %v: %w", r.Label, err, ErrReply)
	}
	if !rep.OK {
		return d, fmt.Errorf("%s: reply ok=false: %w", r.Label, ErrReply)
	}
	return d, nil
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}

// BenchTurn is the turn the baseline runs feed a worker: one short message,
// which the fake model answers at once, with the host's default prompt and
// no tools, as the host builds it for the benchmark's configuration.
func BenchTurn(model string) []byte {
	t := protocol.Turn{
		Text:     "hello from the benchmark",
		Speaker:  protocol.Speaker{ID: "bench-user", Name: "Bench"},
		Model:    model,
		Prompt:   config.DefaultPrompt,
		TimeZone: "UTC",
	}
	data, _ := json.Marshal(t)
	return data
}

// UnixClient is an HTTP client that dials socket for every request.
func UnixClient(socket string, timeout time.Duration, keepAlive bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 64,
		MaxConnsPerHost:     0,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// HostRunner posts one turn to the host API and requires a good reply.
type HostRunner struct {
	Label   string
	Client  *http.Client
	Channel func(seq int) string
	Text    string
	// Before, when set, runs off the clock before each turn (a standby
	// made ready, or discarded so the turn takes the cold path).
	Before func(ctx context.Context, seq int) error
}

// Name is the series name.
func (r *HostRunner) Name() string { return r.Label }

// TurnRequest is the body of POST /v1/channels/{channel}/turns.
type TurnRequest struct {
	Speaker struct {
		ID          string `json:"id"`
		Name        string `json:"name"`
		PrincipalID string `json:"principalId"`
	} `json:"speaker"`
	Text string `json:"text"`
}

// Run posts one turn.
func (r *HostRunner) Run(ctx context.Context, seq int) (time.Duration, error) {
	var body TurnRequest
	body.Speaker.ID, body.Speaker.Name, body.Speaker.PrincipalID = "bench-user", "Bench", "bench-principal"
	body.Text = r.Text
	data, _ := json.Marshal(body)
	if r.Before != nil {
		if err := r.Before(ctx, seq); err != nil {
			return 0, fmt.Errorf("%s: before the turn: %v", r.Label, err)
		}
	}
	u := "http://host/v1/channels/" + url.PathEscape(r.Channel(seq)) + "/turns"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := r.Client.Do(req)
	if err != nil {
		return time.Since(start), fmt.Errorf("%s: %v", r.Label, err)
	}
	rb, err := protocol.ReadBounded(resp.Body, 1<<20)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s: read reply: %v", r.Label, err)
	}
	if resp.StatusCode/100 != 2 {
		return d, fmt.Errorf("%s: status %d: %s: %w", r.Label, resp.StatusCode, tail(string(rb)), ErrReply)
	}
	if err := checkHostReply(rb); err != nil {
		return d, fmt.Errorf("%s: %v: %w", r.Label, err, ErrReply)
	}
	return d, nil
}

// checkHostReply accepts a JSON object that carries a non-empty reply text,
// either as {"ok":true,"text":...} or nested under "reply".
func checkHostReply(b []byte) error {
	var v struct {
		OK    *bool           `json:"ok"`
		Text  string          `json:"text"`
		Reply json.RawMessage `json:"reply"`
		Error string          `json:"error"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("reply is not JSON: %v", err)
	}
	if v.Error != "" {
		return fmt.Errorf("error %q", v.Error)
	}
	if len(v.Reply) > 0 && v.Text == "" {
		var inner struct {
			OK   *bool  `json:"ok"`
			Text string `json:"text"`
		}
		if json.Unmarshal(v.Reply, &inner) == nil {
			v.OK, v.Text = inner.OK, inner.Text
		} else {
			var s string
			if json.Unmarshal(v.Reply, &s) == nil {
				v.Text = s
			}
		}
	}
	if v.OK != nil && !*v.OK {
		return errors.New("reply ok=false")
	}
	if v.Text == "" {
		return errors.New("reply has no text")
	}
	return nil
}
