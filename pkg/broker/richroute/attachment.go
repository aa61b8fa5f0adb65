package richroute

// POST /worker/attachment (richproto.RouteAttachment): the worker asks for
// one of the admitted turn's attachments by index and the broker fetches
// it through its safefetch fetcher (the one vetted dialer: public
// addresses, or exactly the operator's egress.allow), each at most once a
// turn, 25 MiB each and 50 MiB for the turn. The answer is the raw bytes;
// 413 over a bound, 502 a refused or failed fetch, 504 its timeout. The
// worker never names a URL: only the host's bound turn does.

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// AttachmentTimeout bounds one attachment fetch (within the turn's deadline).
const AttachmentTimeout = 60 * time.Second

// attachState is a turn's attachment accounting.
type attachState struct {
	mu      sync.Mutex
	turn    string
	fetched map[int]bool
	sum     int64
	busy    bool
}

func (b *Routes) workerAttachment(w http.ResponseWriter, r *http.Request) (int, []byte, error) {
	if err := pullHeaders(r); err != nil {
		return 0, nil, err
	}
	body, err := readBody(r, 256)
	if err != nil {
		return 0, nil, err
	}
	var req richproto.AttachmentRequest
	if err := protocol.DecodeStrict(body, &req); err != nil {
		return 0, nil, refused("attachment request malformed", envelope.ErrRefused)
	}
	s := b.rich
	s.mu.Lock()
	bd := s.bound
	if bd == nil || !bd.handed || bd.packet || bd.ctx.Err() != nil {
		s.mu.Unlock()
		return 0, nil, refused("attachment request outside the admitted turn", envelope.ErrRefused)
	}
	s.mu.Unlock()
	turn := bd.bind.Turn
	if req.Index < 0 || req.Index >= len(turn.Attachments) {
		return 0, nil, refused("no such attachment", envelope.ErrNotFound)
	}
	st := &s.attach
	st.mu.Lock()
	if st.turn != turn.ID {
		st.turn, st.fetched, st.sum, st.busy = turn.ID, map[int]bool{}, 0, false
	}
	switch {
	case st.busy:
		st.mu.Unlock()
		return 0, nil, refused("an attachment fetch is in flight", envelope.ErrBusy)
	case st.fetched[req.Index]:
		st.mu.Unlock()
		return 0, nil, refused("attachment already fetched this turn", envelope.ErrRefused)
	}
	st.fetched[req.Index] = true
	remaining := int64(richproto.MaxAttachmentsSum) - st.sum
	st.busy = true
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.busy = false
		st.mu.Unlock()
	}()
	if remaining <= 0 {
		return 0, nil, refused("attachments over the turn's total", envelope.ErrTooLarge)
	}

	ctx, cancel := b.CallContext(r.Context())
	defer cancel()
	deadline := time.UnixMilli(turn.DeadlineUnixMs)
	o := safefetch.DefaultOptions()
	o.MaxBytes = min(int64(richproto.MaxAttachmentBytes), remaining)
	o.Timeout = min(AttachmentTimeout, time.Until(deadline))
	if o.Timeout < safefetch.MinTimeout {
		return 0, nil, refused("turn deadline reached", envelope.ErrTurnOver)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(deadline.Add(5 * time.Second))
	start := time.Now()
	res, err := b.fetcher.Fetch(ctx, turn.Attachments[req.Index].URL, o)
	if err == nil && (res.Status < 200 || res.Status > 299) {
		err = errors.New("status not 2xx")
	}
	if err != nil {
		// The kind and the index only: the URL is the guest's.
		b.log.Warn("attachment fetch failed", "index", req.Index, "kind", fetchKind(err), "latency_ms", time.Since(start).Milliseconds())
		switch {
		case errors.Is(err, safefetch.ErrTooLarge):
			return 0, nil, refused("attachment over its bound", envelope.ErrTooLarge)
		case errors.Is(err, safefetch.ErrDeadline):
			return 0, nil, b.host.Interrupted(r, refused("attachment fetch timed out", envelope.ErrUpstreamTime))
		case ctx.Err() != nil:
			return 0, nil, b.host.Interrupted(r, refused("attachment fetch ended with the turn", envelope.ErrClientGone))
		}
		return 0, nil, refused("attachment fetch refused or failed", envelope.ErrUpstream)
	}
	st.mu.Lock()
	st.sum += int64(len(res.Body))
	st.mu.Unlock()
	b.log.Info("attachment fetched", "index", req.Index, "bytes", len(res.Body), "redirects", res.Redirects,
		"latency_ms", time.Since(start).Milliseconds())
	w.Header().Set("Content-Type", "application/octet-stream")
	return http.StatusOK, res.Body, nil
}

// fetchKind names a safefetch error's kind for the log.
func fetchKind(err error) string {
	for _, k := range []error{safefetch.ErrOptions, safefetch.ErrRedirect, safefetch.ErrURL, safefetch.ErrAddress,
		safefetch.ErrResolve, safefetch.ErrConnect, safefetch.ErrDeadline, safefetch.ErrCanceled, safefetch.ErrTooLarge,
		safefetch.ErrEncoding, safefetch.ErrHTTP} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	return "status"
}
