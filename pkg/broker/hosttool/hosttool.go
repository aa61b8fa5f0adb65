// Package hosttool runs the broker's allow-listed host tools: builtin (clock),
// exec (a fixed argv with the JSON input on stdin), http (a POST to a
// trusted URL) and fetch (a guest-named public URL through safefetch, answered
// as bounded text). The bound identity comes from the policy only and reaches an
// exec tool as environment variables and an http tool as headers; nothing in
// the guest's body can change it. Exec tools run in their own process group
// with a minimal environment and are killed with SIGKILL at their deadline,
// on cancellation and when they finish; their stdout is bounded.
package hosttool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// Error categories.
var (
	ErrFailed   = errors.New("tool failed")
	ErrTooLarge = errors.New("tool output too large")
	ErrTimeout  = errors.New("tool timed out")
)

// MaxOutputBytes bounds an exec tool's stdout.
const MaxOutputBytes = 1 << 20

// ExecPath is the only PATH an exec tool sees.
const ExecPath = "/usr/local/bin:/usr/bin:/bin"

// Identity is the turn's bound identity as the tools receive it.
type Identity struct {
	TurnID string
	policy.Identity
}

// LogValue shows the turn only: identity text stays out of logs.
func (id Identity) LogValue() slog.Value { return slog.GroupValue(slog.String("turn", id.TurnID)) }

// Env is the complete environment of an exec tool.
func (id Identity) Env() []string {
	return []string{
		"PATH=" + ExecPath,
		"SANDBOX_TURN_ID=" + id.TurnID,
		"SANDBOX_CHANNEL=" + id.Channel,
		"SANDBOX_SPEAKER_ID=" + id.SpeakerID,
		"SANDBOX_SPEAKER_NAME=" + id.SpeakerName,
		"SANDBOX_PRINCIPAL_ID=" + id.PrincipalID,
	}
}

// Headers sets the identity headers of an http tool call. A value that is
// not plain printable ASCII, has a leading or trailing space, or contains
// '%' is percent-encoded (url.PathEscape), so the receiver recovers every
// value exactly with url.PathUnescape and no two values share a header.
func (id Identity) Headers(h http.Header) {
	h.Set("X-Sandbox-Turn-Id", headerValue(id.TurnID))
	h.Set("X-Sandbox-Channel", headerValue(id.Channel))
	h.Set("X-Sandbox-Speaker-Id", headerValue(id.SpeakerID))
	h.Set("X-Sandbox-Speaker-Name", headerValue(id.SpeakerName))
	h.Set("X-Sandbox-Principal-Id", headerValue(id.PrincipalID))
}

func headerValue(s string) string {
	plain := s == "" || (s[0] != ' ' && s[len(s)-1] != ' ')
	for i := 0; plain && i < len(s); i++ {
		// '%' is always encoded: otherwise "jörg" (encoded) and
		// "j%C3%B6rg" (plain) would be the same header.
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			plain = false
		}
	}
	if plain {
		return s
	}
	return url.PathEscape(s)
}

// Clock is the builtin clock's result: now as RFC 3339 UTC.
func Clock(now time.Time) string { return now.UTC().Format(time.RFC3339) }

// Result turns tool output into the answer's result value: the output itself
// when it is exactly one JSON value, otherwise the output as a JSON string.
func Result(out []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) > 0 && json.Valid(trimmed) {
		return json.RawMessage(trimmed)
	}
	if !utf8.Valid(out) {
		out = bytes.ToValidUTF8(out, []byte("\uFFFD"))
	}
	b, _ := json.Marshal(string(out))
	return b
}

// Exec runs argv with input on stdin and env as its whole environment, in a
// new process group. It returns stdout, failing on a non-zero exit, on output
// over max bytes, or when ctx ends; in every case the whole process group is
// killed with SIGKILL before Exec returns.
func Exec(ctx context.Context, argv []string, env []string, input []byte, max int64) ([]byte, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("hosttool: empty argv: %w", ErrFailed)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Stdin and stdout are our own pipes so no exec.Cmd copier goroutine can
	// hold Wait hostage to a grandchild that keeps a descriptor open.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("hosttool: pipe: %w", ErrFailed)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("hosttool: pipe: %w", ErrFailed)
	}
	defer outR.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, nil // stderr: /dev/null
	if err := cmd.Start(); err != nil {
		inR.Close()
		inW.Close()
		outW.Close()
		return nil, fmt.Errorf("hosttool: start: %w", ErrFailed)
	}
	inR.Close()
	outW.Close()
	pgid := cmd.Process.Pid
	killGroup := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

	go func() {
		_, _ = inW.Write(input) // EPIPE when the tool does not read stdin
		inW.Close()
	}()
	type readResult struct {
		out  []byte
		over bool
	}
	readDone := make(chan readResult, 1)
	go func() {
		data, _ := io.ReadAll(io.LimitReader(outR, max+1))
		over := int64(len(data)) > max
		if over {
			killGroup()
		}
		readDone <- readResult{data, over}
	}()
	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()

	var waitErr error
	var ctxErr error
	select {
	case waitErr = <-waitDone:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		killGroup()
		waitErr = <-waitDone
	}
	killGroup() // stragglers the tool left behind
	var res readResult
	select {
	case res = <-readDone:
	case <-time.After(time.Second):
		// A process outside the group still holds stdout: stop reading.
		_ = outR.SetReadDeadline(time.Now())
		res = <-readDone
	}
	switch {
	case res.over:
		return nil, fmt.Errorf("hosttool: stdout over %d bytes: %w", max, ErrTooLarge)
	case ctxErr != nil:
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			return nil, fmt.Errorf("hosttool: exec deadline: %w", ErrTimeout)
		}
		return nil, fmt.Errorf("hosttool: exec cancelled: %w", ErrFailed)
	case waitErr != nil:
		return nil, fmt.Errorf("hosttool: exec exited unsuccessfully: %w", ErrFailed)
	}
	return res.out, nil
}

// HTTP posts input to the trusted url with the identity headers and, when
// bearer is not empty, an Authorization header. client must refuse
// redirects and carry no cookie jar. The response must be 2xx and at most max
// bytes; its headers are dropped.
func HTTP(ctx context.Context, client *http.Client, rawURL string, id Identity, bearer string, input []byte, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(input))
	if err != nil {
		return nil, fmt.Errorf("hosttool: build request: %w", ErrFailed)
	}
	req.Header = http.Header{}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "roundtable-sandbox-broker")
	id.Headers(req.Header)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("hosttool: http deadline: %w", ErrTimeout)
		}
		return nil, fmt.Errorf("hosttool: http request failed: %w", ErrFailed)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("hosttool: http status %d: %w", resp.StatusCode, ErrFailed)
	}
	if resp.ContentLength > max {
		return nil, fmt.Errorf("hosttool: http response over %d bytes: %w", max, ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("hosttool: http read failed: %w", ErrFailed)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("hosttool: http response over %d bytes: %w", max, ErrTooLarge)
	}
	return data, nil
}
