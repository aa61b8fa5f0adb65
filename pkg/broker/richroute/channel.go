package richroute

// A rich channel's broker (DESIGN.md section 13, policy.Rich) lives as long
// as its channel session and serves many turns. Besides the credential
// routes it has the worker's pull routes and the host's control route:
//
//   - POST /worker/ready: the worker announces itself (richproto.Ready; an
//     empty body is no capabilities, a malformed one is refused). A
//     re-announce while a handed turn is open fails that turn: the worker
//     restarted and lost it.
//   - POST /worker/next: the long poll. Exactly one may wait at a time (a
//     second is refused), and only after a /worker/ready to this broker (a
//     worker that announced itself to an earlier one is refused and
//     announces again); it answers the admitted turn (richproto.Turn) or
//     204 after PollWait, so the worker polls again.
//   - POST /worker/result: the reply packet of the handed turn, refused
//     before its body is read outside that turn or once a packet came; at
//     most richproto.MaxPacketBytes; one a turn.
//   - POST /control/turn: the host only (the peer's SO_PEERCRED uid must be
//     the host's, checked before anything is read): a policy.Bind. The
//     broker binds the turn's identity, hands the turn to the long poll and
//     answers the worker's reply packet; the bind is revoked when the
//     request ends (reply, failure, the turn deadline, or the host going
//     away), and every credential-bearing call of the turn ends with it.
//
//   - POST /compact and /compact/report (compact.go): the operator's
//     compactor and the worker's compaction reports, inside a bound turn.
//
// Credential-bearing calls (model, host tools, MCP) are refused outside a
// bound turn. Before the first bind a startup scope admits metadata-only
// calls (policy.StartupScopeDuration, policy.StartupScopeCalls); it ends at
// the first bind.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// Routes of a rich channel broker's host-only control path (policy).
const (
	RouteControlTurn   = policy.RouteControlTurn
	RouteControlStatus = policy.RouteControlStatus
)

// ControlStatus answers /control/status.
type ControlStatus = policy.ControlStatus

// Bounds of the pull and control routes.
const (
	// PollWait is how long an idle /worker/next waits before 204.
	PollWait = 25 * time.Second
	// MaxBindBytes bounds a control request (a turn with its tool specs).
	MaxBindBytes = 4 << 20
)

// Worker failure causes the broker reports to the host in a failed Result
// (richproto fixed categories).
var (
	errWorkerRestarted = errors.New("worker re-announced mid-turn")
	errBadPacket       = errors.New("reply packet refused")
)

// richState is the pull protocol and bind state of a rich channel broker.
type richState struct {
	started  time.Time
	pollWait time.Duration
	// refused counts refused pull and control requests over the broker's
	// life; past the broker's MaxRefusals they are no longer logged one by
	// one.
	refused atomic.Int64
	// controlUID is the only peer uid /control/* accepts (the host's).
	controlUID int

	mu           sync.Mutex
	everBound    bool
	startupCalls int
	polling      bool
	ready        *richproto.Ready
	bound        *richBinding
	wake         chan struct{} // closed and replaced when a turn is bound

	// compact is the compactor routes' state (compact.go), made on first use.
	compactOnce sync.Once
	compact     *compactorRoutes
	// attach is the turn's attachment accounting (attachment.go).
	attach attachState
}

// richBinding is one bound turn.
type richBinding struct {
	bind   policy.Bind
	at     time.Time       // when it was bound: the turn's length is Turn.DeadlineUnixMs - at
	ctx    context.Context // ends at revoke: every call of the turn ends with it
	cancel context.CancelFunc
	handed bool // given to a long poll
	// poisoned: a private result met an incompatible worker (private.go);
	// no call of the turn is admitted any more.
	poisoned bool
	packet   bool // a reply packet was admitted (one a turn)
	// settled receives the turn's outcome once (buffered).
	settled chan settleOutcome
}

type settleOutcome struct {
	body []byte // the validated reply packet as the worker sent it
	err  error
}

func newRichState(now time.Time, controlUID int, pollWait time.Duration) *richState {
	if pollWait <= 0 {
		pollWait = PollWait
	}
	return &richState{started: now, controlUID: controlUID, pollWait: pollWait, wake: make(chan struct{})}
}

// Binding is what a credential-bearing rich route needs of the bound
// turn: the identity and turn (thinking ceiling, deadline) the host bound,
// and a context that ends when the host revokes it.
type Binding struct {
	Bind policy.Bind
	At   time.Time
	Ctx  context.Context
}

// Bound returns the bound turn, or ok false outside one (the caller
// refuses the credential-bearing call: ErrUnauthorized).
func (b *Routes) Bound() (Binding, bool) {
	if b.rich == nil {
		return Binding{}, false
	}
	b.rich.mu.Lock()
	defer b.rich.mu.Unlock()
	bd := b.rich.bound
	if bd == nil || bd.ctx.Err() != nil || bd.poisoned {
		return Binding{}, false
	}
	return Binding{Bind: bd.bind, At: bd.at, Ctx: bd.ctx}, true
}

// Allow admits one call of a rich broker's credential routes: inside a
// bound turn any; before the first bind, metadata-only calls within the
// startup scope; nothing else.
func (b *Routes) Allow(metadataOnly bool) error {
	s := b.rich
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bound != nil && s.bound.ctx.Err() == nil && !s.bound.poisoned {
		return nil
	}
	if s.bound != nil && s.bound.poisoned {
		return refused("turn failed: private result for an incompatible worker", ErrIncompatibleWorker)
	}
	if !metadataOnly || s.everBound {
		return refused("credential-bearing call outside a bound turn", envelope.ErrUnauthorized)
	}
	if b.now().Sub(s.started) >= policy.StartupScopeDuration || s.startupCalls >= policy.StartupScopeCalls {
		return refused("startup scope over", envelope.ErrUnauthorized)
	}
	s.startupCalls++
	return nil
}

// CallContext ties a rich call to its bound turn: it ends at revoke.
func (b *Routes) CallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	bd, ok := b.Bound()
	if !ok {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(bd.Ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// serveRich answers the pull and control routes; false for any other
// request (the ordinary route checks then apply).
func (b *Routes) serveRich(w http.ResponseWriter, r *http.Request) bool {
	var h func(http.ResponseWriter, *http.Request) (int, []byte, error)
	switch r.RequestURI {
	case richproto.RouteReady:
		h = b.workerReady
	case richproto.RouteNext:
		h = b.workerNext
	case richproto.RouteResult:
		h = b.workerResult
	case RouteControlTurn:
		h = b.controlTurn
	case RouteControlStatus:
		h = b.controlStatus
	case RouteCompact:
		h = b.serveCompact
	case RouteCompactReport:
		h = b.serveCompactReport
	case richproto.RouteAttachment:
		h = b.workerAttachment
	default:
		return false
	}
	start := time.Now()
	code, answer, err := 0, []byte(nil), error(nil)
	if r.Method != http.MethodPost {
		err = refused("method not allowed", envelope.ErrMethod)
	} else if !b.now().Before(b.pol.Deadline()) {
		err = refused("session over", envelope.ErrTurnOver)
	} else {
		code, answer, err = h(w, r)
	}
	if err != nil {
		var public string
		code, public = b.host.Status(err)
		answer, _ = json.Marshal(map[string]string{"error": public})
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	if err != nil {
		hd.Set("Connection", "close")
	}
	if code != http.StatusNoContent && (err != nil || hd.Get("Content-Type") == "") {
		hd.Set("Content-Type", "application/json") // (an attachment's bytes set their own)
	}
	w.WriteHeader(code)
	if code != http.StatusNoContent {
		_, _ = w.Write(answer)
	}
	attrs := []any{"route", r.RequestURI, "status", code, "latency_ms", time.Since(start).Milliseconds()}
	switch {
	case err != nil && !errors.Is(err, envelope.ErrClientGone) && b.rich.refused.Add(1) > int64(b.maxLogged):
		// A worker looping refused pull requests must not flood the
		// journal: counted, logged once when the broker stops.
		b.host.Unread()
	case err != nil && !errors.Is(err, envelope.ErrClientGone):
		b.log.Warn("call refused", append(attrs, "reason", err.Error())...)
	case r.RequestURI == richproto.RouteNext && code == http.StatusNoContent, r.RequestURI == RouteControlStatus:
		// an idle poll: no line, the worker repeats it every PollWait
	default:
		b.log.Info("call", attrs...)
	}
	return true
}

// pullHeaders: HTTP/1.1, the dummy key, a JSON body with a Content-Length
// (or none), no other header.
func pullHeaders(r *http.Request) error {
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		// An empty body needs no content type.
		h := r.Header.Clone()
		h.Set("Content-Type", "application/json")
		r = r.Clone(r.Context())
		r.Header = h
	}
	return envelope.CheckHeaders(r)
}

// readBody reads a body of exactly its Content-Length, at most max bytes.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, refused("body over the limit", envelope.ErrTooLarge)
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, refused("body unreadable", envelope.ErrRefused)
	}
	return body, nil
}

func (b *Routes) workerReady(_ http.ResponseWriter, r *http.Request) (int, []byte, error) {
	if err := pullHeaders(r); err != nil {
		return 0, nil, err
	}
	body, err := readBody(r, richproto.MaxReadyBytes)
	if err != nil {
		return 0, nil, err
	}
	var ready richproto.Ready
	if len(body) > 0 {
		if err := protocol.DecodeStrict(body, &ready); err != nil || !wellFormedReady(body) {
			return 0, nil, refused("ready body malformed", envelope.ErrRefused)
		}
	}
	s := b.rich
	s.mu.Lock()
	s.ready = &ready
	bd := s.bound
	restarted := bd != nil && bd.handed && !bd.packet
	if restarted {
		bd.packet = true // no packet of the lost turn is admitted any more
	}
	s.mu.Unlock()
	if restarted {
		bd.settle(settleOutcome{err: errWorkerRestarted})
	}
	b.log.Info("worker ready", "private_to", ready.Capabilities.PrivateTo, "reader_records", ready.Capabilities.ReaderRecords,
		"private_history", ready.PrivateHistory, "lost_turn", restarted)
	return http.StatusOK, []byte(`{}`), nil
}

func (bd *richBinding) settle(o settleOutcome) {
	select {
	case bd.settled <- o:
	default: // already settled
	}
}

func (b *Routes) workerNext(w http.ResponseWriter, r *http.Request) (int, []byte, error) {
	if err := pullHeaders(r); err != nil {
		return 0, nil, err
	}
	if r.ContentLength != 0 {
		return 0, nil, refused("next takes no body", envelope.ErrRefused)
	}
	s := b.rich
	s.mu.Lock()
	if s.ready == nil {
		// What a turn may carry depends on the announcement (private.go):
		// a worker that announced itself to a broker before this one (a
		// restart between its ready and its poll, or between two polls)
		// must announce again rather than be taken for one without
		// capabilities.
		s.mu.Unlock()
		return 0, nil, refused("poll before the worker announced itself", envelope.ErrRefused)
	}
	if s.polling {
		s.mu.Unlock()
		return 0, nil, refused("a long poll is already waiting", envelope.ErrBusy)
	}
	s.polling = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.polling = false
		s.mu.Unlock()
	}()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.pollWait + 10*time.Second))
	_ = rc.SetWriteDeadline(time.Now().Add(s.pollWait + 10*time.Second))
	timer := time.NewTimer(s.pollWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		bd, wake := s.bound, s.wake
		if bd != nil && !bd.handed && bd.ctx.Err() == nil {
			bd.handed = true
			if !historyAllowed(s.ready) {
				// The bind's own check saw an earlier announcement (or
				// none): the one that counts is the latest, at hand time.
				bd.poisoned, bd.packet = true, true
				s.mu.Unlock()
				bd.settle(settleOutcome{err: errHistoryIncompatible})
				return 0, nil, refused(errHistoryIncompatible.Error(), ErrIncompatibleWorker)
			}
			s.mu.Unlock()
			turn := bd.bind.Turn
			turn.Reader = bd.bind.Identity.PrincipalID // the host's binding, never the turn's text
			out, err := json.Marshal(turn)
			if err != nil {
				bd.settle(settleOutcome{err: err})
				return 0, nil, refused("turn not encodable", envelope.ErrUnavailable)
			}
			// The worker has the turn from here; a failed write loses it
			// and the host's deadline settles it.
			return http.StatusOK, out, nil
		}
		s.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			return http.StatusNoContent, nil, nil
		case <-r.Context().Done():
			return 0, nil, b.host.Interrupted(r, refused("poll ended", envelope.ErrClientGone))
		}
	}
}

func (b *Routes) workerResult(w http.ResponseWriter, r *http.Request) (int, []byte, error) {
	s := b.rich
	// Refused before the body is read: outside the handed turn, or once
	// its packet came; then the headers and the size.
	s.mu.Lock()
	bd := s.bound
	if bd == nil || !bd.handed || bd.packet || bd.ctx.Err() != nil {
		s.mu.Unlock()
		return 0, nil, refused("reply packet outside the admitted turn", envelope.ErrRefused)
	}
	if err := pullHeaders(r); err != nil {
		s.mu.Unlock()
		return 0, nil, err
	}
	if r.ContentLength > richproto.MaxPacketBytes {
		s.mu.Unlock()
		return 0, nil, refused("reply packet over the limit", envelope.ErrTooLarge)
	}
	bd.packet = true
	s.mu.Unlock()
	rc := http.NewResponseController(w)
	dl := time.UnixMilli(bd.bind.Turn.DeadlineUnixMs)
	_ = rc.SetReadDeadline(dl)
	_ = rc.SetWriteDeadline(dl.Add(5 * time.Second))
	body, err := readBody(r, richproto.MaxPacketBytes)
	if err != nil {
		bd.settle(settleOutcome{err: errBadPacket})
		return 0, nil, err
	}
	// The host's decoder: the same rules, and a packet costs its body, its
	// files and one file's value, not a second copy of the body.
	res, err := richproto.DecodeResult(bytes.NewReader(body))
	if err != nil || res.TurnID != bd.bind.Turn.ID {
		bd.settle(settleOutcome{err: errBadPacket})
		return 0, nil, refused("reply packet invalid or of another turn", envelope.ErrRefused)
	}
	bd.settle(settleOutcome{body: body})
	return http.StatusOK, []byte(`{}`), nil
}

// controlTurn binds one turn, hands it to the long poll and answers the
// worker's reply packet; the bind is revoked when it returns.
func (b *Routes) controlTurn(w http.ResponseWriter, r *http.Request) (int, []byte, error) {
	s := b.rich
	if uid, ok := envelope.PeerUID(r.Context()); !ok || uid != s.controlUID {
		return 0, nil, refused("control route from a peer other than the host", envelope.ErrNotFound)
	}
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.ContentLength < 0 || len(r.TransferEncoding) > 0 {
		return 0, nil, refused("control request malformed", envelope.ErrLengthRequired)
	}
	body, err := readBody(r, MaxBindBytes)
	if err != nil {
		return 0, nil, err
	}
	var bind policy.Bind
	if err := protocol.DecodeStrict(body, &bind); err != nil {
		return 0, nil, refused("bind malformed", envelope.ErrRefused)
	}
	if err := bind.Validate(b.pol); err != nil {
		return 0, nil, refused("bind invalid", envelope.ErrRefused)
	}
	deadline := time.UnixMilli(bind.Turn.DeadlineUnixMs)
	if !b.now().Before(deadline) {
		return 0, nil, refused("turn deadline passed", envelope.ErrTurnOver)
	}
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	bd := &richBinding{bind: bind, at: b.now(), ctx: ctx, cancel: cancel, settled: make(chan settleOutcome, 1)}
	s.mu.Lock()
	if s.bound != nil {
		s.mu.Unlock()
		return 0, nil, refused("a turn is already bound", envelope.ErrBusy)
	}
	if !historyAllowed(s.ready) {
		// Refused at once when already known; the long poll checks again
		// against the announcement it hands the turn under.
		s.mu.Unlock()
		return 0, nil, refused(errHistoryIncompatible.Error(), ErrIncompatibleWorker)
	}
	s.bound, s.everBound = bd, true
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
	// The turn's own budgets.
	b.host.NewTurn()
	defer func() {
		cancel()
		s.mu.Lock()
		if s.bound == bd {
			s.bound = nil
		}
		s.mu.Unlock()
		b.log.Info("turn revoked", "rich_turn", bind.Turn.ID)
	}()
	b.log.Info("turn bound", "rich_turn", bind.Turn.ID)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(deadline.Add(5 * time.Second))
	_ = rc.SetReadDeadline(deadline.Add(5 * time.Second))
	select {
	case o := <-bd.settled:
		if errors.Is(o.err, errIncompatible) || errors.Is(o.err, errHistoryIncompatible) {
			return 0, nil, refused(o.err.Error(), ErrIncompatibleWorker)
		}
		if o.err != nil {
			return 0, nil, refused(o.err.Error(), envelope.ErrUnavailable)
		}
		return http.StatusOK, o.body, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, nil, refused("turn deadline reached", envelope.ErrTurnOver)
		}
		return 0, nil, b.host.Interrupted(r, refused("host went away", envelope.ErrClientGone))
	}
}

// controlStatus tells the host whether the worker is up (the start gate).
func (b *Routes) controlStatus(_ http.ResponseWriter, r *http.Request) (int, []byte, error) {
	s := b.rich
	if uid, ok := envelope.PeerUID(r.Context()); !ok || uid != s.controlUID {
		return 0, nil, refused("control route from a peer other than the host", envelope.ErrNotFound)
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return 0, nil, refused("status takes no body", envelope.ErrRefused)
	}
	s.mu.Lock()
	st := ControlStatus{Ready: s.ready != nil, Polling: s.polling, Bound: s.bound != nil}
	s.mu.Unlock()
	out, _ := json.Marshal(st)
	return http.StatusOK, out, nil
}
