// Package brokerbench measures what the broker adds to one model call: the
// same Chat Completions request sent straight to a local fake upstream and
// through a real `sandbox-broker serve --listen` process (HTTP over its Unix
// socket with the dummy key), interleaved pair by pair, alternating which
// goes first. The broker is the production binary with a real policy and a
// credentials directory; the upstream checks that the real key arrived.
package brokerbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/fakeupstream"
	"github.com/roundtable-sandbox/sandbox/bench/internal/procmem"
	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Config of one run.
type Config struct {
	Broker         string // sandbox-broker binary
	WorkDir        string // scratch directory (policies, credentials, socket)
	Iterations     int    // pairs per connection mode
	CallsPerBroker int    // calls before a fresh broker (a turn's broker is bounded)
	Modes          []string
}

// Connection modes.
const (
	ModeKeepAlive = "keep-alive"
	ModeNewConn   = "new connection per call"
)

const secret = "sk-bench-not-a-real-key"

// RequestBody is a worker-shaped model request: a system prompt, a user
// message and the three memory tools, so the broker's message and schema
// checks run as they do in a turn.
const RequestBody = `{"model":"bench-model","max_tokens":256,"messages":[` +
	`{"role":"system","content":"You are a benchmark. Answer briefly."},` +
	`{"role":"user","content":"hello from the benchmark"}],"tools":[` +
	`{"type":"function","function":{"name":"memory_set","description":"Store a value.","parameters":{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"},"value":{"type":"string"}},"required":["scope","key","value"],"additionalProperties":false}}},` +
	`{"type":"function","function":{"name":"memory_get","description":"Read a value.","parameters":{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"}},"required":["scope","key"],"additionalProperties":false}}},` +
	`{"type":"function","function":{"name":"memory_remove","description":"Remove a value.","parameters":{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"}},"required":["scope","key"],"additionalProperties":false}}}]}`

// brokerProc is one running broker.
type brokerProc struct {
	cmd    *exec.Cmd
	socket string
	stderr *bytes.Buffer
}

// Run measures every mode and returns the results.
func Run(ctx context.Context, c Config) (*report.Broker, error) {
	if c.Iterations < 1 || c.CallsPerBroker < 1 {
		return nil, errors.New("brokerbench: iterations and calls per broker must be positive")
	}
	up := &fakeupstream.Handler{Key: secret}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: up, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	upURL := "http://" + ln.Addr().String() + "/v1/chat/completions"

	for _, d := range []string{"policies", "credentials", "run"} {
		if err := os.MkdirAll(filepath.Join(c.WorkDir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := atomicfile.WriteFile(filepath.Join(c.WorkDir, "credentials", layout.CredentialPrefix+"bench"), []byte(secret+"\n"), 0o600); err != nil {
		return nil, err
	}
	res := &report.Broker{Iterations: c.Iterations, CallsPerBroker: c.CallsPerBroker, LoadStart: report.LoadAvg(),
		BrokerCommand: filepath.Base(c.Broker) + " serve --turn <turn> --policy-dir <dir> --credentials-dir <dir> --listen <sock>"}

	for _, mode := range c.Modes {
		m := report.BrokerMode{Mode: mode}
		fresh := mode == ModeNewConn
		dc := newClient(&net.Dialer{}, "tcp", "", fresh)
		var dMs, bMs, diff []float64
		var bp *brokerProc
		var bc *client
		calls := 0
		for i := 0; i < c.Iterations && ctx.Err() == nil; i++ {
			if bp == nil || calls >= c.CallsPerBroker {
				if bp != nil {
					res.RSSAfterKiB = max(res.RSSAfterKiB, bp.rss())
					res.HWMKiB = max(res.HWMKiB, bp.hwm())
					bp.stop()
				}
				bp, err = startBroker(ctx, c, upURL, c.CallsPerBroker+4)
				if err != nil {
					return nil, err
				}
				res.Brokers++
				res.RSSIdleKiB = max(res.RSSIdleKiB, bp.rss())
				bc = newClient(&net.Dialer{}, "unix", bp.socket, fresh)
				calls = 0
			}
			var td, tb time.Duration
			var ed, eb error
			if i%2 == 0 {
				td, ed = call(ctx, dc, upURL, "Bearer "+secret)
				tb, eb = call(ctx, bc, "http://broker/model", "Bearer "+protocol.DummyAPIKey)
			} else {
				tb, eb = call(ctx, bc, "http://broker/model", "Bearer "+protocol.DummyAPIKey)
				td, ed = call(ctx, dc, upURL, "Bearer "+secret)
			}
			calls++
			if err := errors.Join(ed, eb); err != nil {
				m.Failures++
				if len(m.Errors) < 5 {
					m.Errors = append(m.Errors, err.Error())
				}
				if len(m.Errors) == 1 {
					slog.Warn("broker bench call failed", "err", err, "brokerStderr", tailString(bp.stderr.String()))
				}
				continue
			}
			dMs, bMs = append(dMs, stats.Ms(td)), append(bMs, stats.Ms(tb))
			diff = append(diff, stats.Ms(tb-td))
		}
		if bp != nil {
			res.RSSAfterKiB = max(res.RSSAfterKiB, bp.rss())
			res.HWMKiB = max(res.HWMKiB, bp.hwm())
			bp.stop()
		}
		m.Direct, m.Broker, m.Diff = stats.Summarize(dMs), stats.Summarize(bMs), stats.Summarize(diff)
		slog.Info("broker overhead", "mode", mode, "direct", m.Direct.Median, "broker", m.Broker.Median,
			"diffMedian", m.Diff.Median, "diffP95", m.Diff.P95, "failures", m.Failures)
		res.Modes = append(res.Modes, m)
	}
	res.UpstreamBadAuth = up.BadAuth()
	res.LoadEnd = report.LoadAvg()
	return res, ctx.Err()
}

// client is an HTTP client shaped like the worker's (pkg/worker): one
// connection, no compression; fresh closes the connection after each call
// without sending "Connection: close" (a hop-by-hop header the broker refuses).
type client struct {
	*http.Client
	fresh bool
}

func newClient(d *net.Dialer, network, addr string, fresh bool) *client {
	tr := &http.Transport{
		Proxy:              nil,
		DisableCompression: true,
		MaxIdleConns:       1,
		MaxConnsPerHost:    1,
	}
	if network == "unix" {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", addr) }
	}
	return &client{Client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, fresh: fresh}
}

func call(ctx context.Context, c *client, url, auth string) (time.Duration, error) {
	if c.fresh {
		defer c.CloseIdleConnections()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(RequestBody))
	if err != nil {
		return 0, err
	}
	req.Host = "broker"
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sandbox-worker")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return time.Since(start), err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("bench reply")) {
		return d, fmt.Errorf("%s: status %d: %s", url, resp.StatusCode, tailString(string(body)))
	}
	return d, nil
}

func startBroker(ctx context.Context, c Config, upURL string, maxCalls int) (*brokerProc, error) {
	turn := ids.NewTurnID()
	channel := "bench-broker"
	p := &policy.Policy{
		Version:        policy.Version,
		TurnID:         turn,
		Identity:       policy.Identity{Channel: channel, ChannelTag: ids.ChannelTag(channel), SpeakerID: "bench-user", SpeakerName: "Bench", PrincipalID: "bench-principal"},
		DeadlineUnixMs: time.Now().Add(30 * time.Minute).UnixMilli(),
		Model:          policy.Model{URL: upURL, Name: "bench-model", MaxTokens: policy.DefaultMaxTokens, Credential: "bench", AllowHTTP: true},
		Limits:         policy.DefaultLimits(),
	}
	p.Limits.MaxCalls = min(maxCalls, 1000)
	data, err := p.Marshal()
	if err != nil {
		return nil, err
	}
	pdir := filepath.Join(c.WorkDir, "policies")
	if err := atomicfile.WriteFile(filepath.Join(pdir, turn+".json"), data, 0o640); err != nil {
		return nil, err
	}
	sock := filepath.Join(c.WorkDir, "run", turn[:8]+".sock")
	var stderr bytes.Buffer
	cmd := exec.Command(c.Broker, "serve", "--turn", turn, "--policy-dir", pdir,
		"--credentials-dir", filepath.Join(c.WorkDir, "credentials"), "--listen", sock)
	cmd.Stderr = &stderr
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	bp := &brokerProc{cmd: cmd, socket: sock, stderr: &stderr}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			return bp, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			bp.stop()
			return nil, fmt.Errorf("broker did not listen on %s within 5s: %s", sock, tailString(stderr.String()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (b *brokerProc) rss() int64 { r, _, _ := procmem.Status(b.cmd.Process.Pid); return r }
func (b *brokerProc) hwm() int64 { _, h, _ := procmem.Status(b.cmd.Process.Pid); return h }

func (b *brokerProc) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
	_ = os.Remove(b.socket)
}

func tailString(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = "..." + s[len(s)-400:]
	}
	return s
}
