package richroute

// The host compactor of a rich channel broker (DESIGN.md section 13, the
// seed's "Compaction"):
//
//   - POST /compact (only with policy.Rich.Compactor): the body is a
//     sessions.CompactRequest of at most the compactor's maxRequestBytes.
//     The broker runs the operator's compactor, exec (argv, the request on
//     stdin, the answer on stdout, its process group killed at its
//     timeout: hosttool.Exec) or http (a POST of the request to its fixed
//     URL through an upstream client that refuses redirects), and answers a
//     sessions.CompactAnswer: the Compaction with details.engine set to
//     the operator's engine, or a fallback reason for the worker's own
//     summary (undefined, error, shape, timeout, too-large, budget, busy,
//     no-time, reflected). Its time is the operator's timeout (default the
//     smaller of 120 s and a third of the turn) and never more than half
//     of what the turn has left, so the worker's own summary keeps time.
//     A turn asks at most sessions.MaxHostCompactions times; while a
//     compactor still runs, a new request falls back (busy).
//   - POST /compact/report: the worker's report of a compaction (its own
//     or the host's) for the broker's log; sessions.MaxReports a turn.
//
// Log lines carry the trigger, engine, token numbers and the fallback
// reason, never a summary, message or file name.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/compactor"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/hosttool"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

// Routes of the compactor.
const (
	RouteCompact       = "/compact"
	RouteCompactReport = "/compact/report"
)

// Bounds of the compactor routes.
const (
	// MaxReportBytes bounds a report body.
	MaxReportBytes = 4 << 10
	// MinCompactorTime: with less than this to give the compactor, the
	// request falls back at once (no-time).
	MinCompactorTime = compactor.MinTime
)

// FallbackReflected: the compactor's answer reflects a credential.
const FallbackReflected = compactor.FallbackReflected

// CompactTurn is what the compactor routes need of the bound turn.
type CompactTurn = compactor.Turn

// compactorRoutes is a rich broker's compactor: the domain's state
// (package compactor) and the transport the broker gives it.
type compactorRoutes struct {
	cfg  *policy.Compactor // nil: no compactor (reports only)
	core *compactor.Compactor
}

// newCompactor builds the compactor of a rich policy. creds loads the http
// compactor's bearer (read per call, so rotation works); secrets lists
// every credential an answer must not reflect.
func newCompactor(cfg *policy.Compactor, creds Credentials, secrets func() []credential.Secret, log *slog.Logger, now func() time.Time) *compactorRoutes {
	reflected := func(v any) bool { return credential.Reflected(v, secrets()...) }
	return &compactorRoutes{cfg: cfg, core: compactor.New(cfg, compactRunner(cfg, creds), reflected, log, now)}
}

// compactRunner is the transport of the operator's compactor: exec (argv,
// the request on stdin, killed by process group: hosttool.Exec) or http (a
// POST to its fixed URL without redirects: hosttool.HTTP).
func compactRunner(cfg *policy.Compactor, creds Credentials) compactor.Runner {
	if cfg == nil {
		return nil
	}
	mapErr := func(out []byte, err error) ([]byte, error) {
		switch {
		case errors.Is(err, hosttool.ErrTimeout):
			return out, fmt.Errorf("%w: %w", compactor.ErrTimeout, err)
		case errors.Is(err, hosttool.ErrTooLarge):
			return out, fmt.Errorf("%w: %w", compactor.ErrTooLarge, err)
		}
		return out, err
	}
	switch cfg.Kind {
	case policy.CompactorExec:
		argv := cfg.Argv
		return func(ctx context.Context, input []byte, t compactor.Turn) ([]byte, error) {
			env := []string{"PATH=" + hosttool.ExecPath, "SANDBOX_TURN_ID=" + t.ID, "SANDBOX_CHANNEL=" + t.Identity.Channel}
			return mapErr(hosttool.Exec(ctx, argv, env, input, sessions.MaxAnswerBytes))
		}
	case policy.CompactorHTTP:
		client := envelope.NewUpstreamClient(policy.MaxCompactorTimeoutSeconds * time.Second)
		return func(ctx context.Context, input []byte, t compactor.Turn) ([]byte, error) {
			bearer := ""
			if cfg.Credential != "" {
				s, err := creds.Load(cfg.Credential)
				if err != nil || s.Empty() {
					return nil, fmt.Errorf("broker: compactor credential unavailable: %w", hosttool.ErrFailed)
				}
				bearer = s.Reveal()
			}
			id := hosttool.Identity{TurnID: t.ID, Identity: t.Identity}
			return mapErr(hosttool.HTTP(ctx, client, cfg.URL, id, bearer, input, sessions.MaxAnswerBytes))
		}
	}
	return nil
}

// compact serves POST /compact for the bound turn t; ctx ends with the
// request or the turn's revoke. Refusals that need no body come first.
func (c *compactorRoutes) compact(ctx context.Context, r *http.Request, t CompactTurn) (int, []byte, error) {
	if !c.core.Configured() {
		return 0, nil, refused("no compactor configured", envelope.ErrNotFound)
	}
	if err := envelope.CheckHeaders(r); err != nil {
		return 0, nil, err
	}
	call := c.core.Begin(t)
	if r.ContentLength > c.core.RequestBytes() {
		return http.StatusOK, call.Fallback(sessions.FallbackTooLarge), nil
	}
	if !call.Acquire() {
		return http.StatusOK, call.Fallback(sessions.FallbackBusy), nil
	}
	defer call.Release()
	body, err := readExact(r, c.core.RequestBytes())
	if err != nil {
		return 0, nil, err
	}
	req, err := sessions.ParseCompactRequest(body)
	if err != nil {
		return 0, nil, refused("compact request out of shape", envelope.ErrRefused)
	}
	out, err := call.Compact(ctx, req, t)
	if err != nil {
		return 0, nil, refused("compact request not encodable", envelope.ErrRefused)
	}
	return http.StatusOK, out, nil
}

// readExact reads a body of exactly its Content-Length, at most max bytes.
func readExact(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, refused("body over the limit", envelope.ErrTooLarge)
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, refused("body unreadable", envelope.ErrRefused)
	}
	return body, nil
}

// report serves POST /compact/report: one log line per report, at most
// sessions.MaxReports a turn.
func (c *compactorRoutes) report(r *http.Request, t CompactTurn) (int, []byte, error) {
	if err := envelope.CheckHeaders(r); err != nil {
		return 0, nil, err
	}
	body, err := readExact(r, MaxReportBytes)
	if err != nil {
		return 0, nil, err
	}
	rep, err := sessions.ParseReport(body)
	if err != nil {
		return 0, nil, refused("compaction report out of shape", envelope.ErrRefused)
	}
	if !c.core.Report(rep, t) {
		return 0, nil, refused(fmt.Sprintf("more than %d compaction reports this turn", sessions.MaxReports), envelope.ErrCallLimit)
	}
	return http.StatusOK, []byte(`{}`), nil
}

// compactState is the rich broker's compactor state, made on first use.
func (b *Routes) compactState() *compactorRoutes {
	s := b.rich
	s.compactOnce.Do(func() {
		var cfg *policy.Compactor
		if b.pol.Rich != nil {
			cfg = b.pol.Rich.Compactor
		}
		secrets := func() []credential.Secret {
			out := b.host.Secrets(nil)
			for _, n := range []string{b.pol.Rich.Credential, compactorCredential(cfg)} {
				if n == "" {
					continue
				}
				if sec, err := b.creds.Load(n); err == nil {
					out = append(out, sec)
				}
			}
			return out
		}
		s.compact = newCompactor(cfg, b.creds, secrets, b.log.With("route", RouteCompact), b.now)
	})
	return s.compact
}

func compactorCredential(c *policy.Compactor) string {
	if c == nil {
		return ""
	}
	return c.Credential
}

// compactTurn is the bound turn of a compactor route, refused outside one.
func (b *Routes) compactTurn() (CompactTurn, context.Context, error) {
	bd, ok := b.Bound()
	if !ok {
		return CompactTurn{}, nil, refused("compaction outside a bound turn", envelope.ErrUnauthorized)
	}
	deadline := time.UnixMilli(bd.Bind.Turn.DeadlineUnixMs)
	return CompactTurn{ID: bd.Bind.Turn.ID, Identity: bd.Bind.Identity, Deadline: deadline, Length: deadline.Sub(bd.At)}, bd.Ctx, nil
}

// serveCompact is POST /compact of a rich broker (serveRich).
func (b *Routes) serveCompact(_ http.ResponseWriter, r *http.Request) (int, []byte, error) {
	c := b.compactState()
	if c.cfg == nil {
		return 0, nil, refused("no compactor configured", envelope.ErrNotFound)
	}
	t, turnCtx, err := b.compactTurn()
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(turnCtx, cancel) // the compactor ends with the turn's revoke
	defer stop()
	return c.compact(ctx, r, t)
}

// serveCompactReport is POST /compact/report of a rich broker (serveRich).
func (b *Routes) serveCompactReport(_ http.ResponseWriter, r *http.Request) (int, []byte, error) {
	t, _, err := b.compactTurn()
	if err != nil {
		return 0, nil, err
	}
	return b.compactState().report(r, t)
}
