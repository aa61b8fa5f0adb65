package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// MaxBodyBytes bounds every request body: 32,000 characters of text escaped
// as JSON (up to 6 bytes each) plus the speaker fields fit.
const MaxBodyBytes = 256 << 10

// MaxRichBodyBytes bounds a rich channel's turn request: 100,000
// characters of text escaped as JSON plus the speaker fields and ten
// attachments (URL, name and type, escaped).
const MaxRichBodyBytes = 800 << 10

// BodyReadTimeout bounds reading one request body (a variable for tests).
var BodyReadTimeout = 30 * time.Second

// Wire types of the API (pkg/client mirrors them).
type (
	// SpeakerJSON is who spoke; principalId never reaches the worker.
	SpeakerJSON struct {
		ID          string `json:"id"`
		Name        string `json:"name"`
		PrincipalID string `json:"principalId,omitempty"`
	}
	// TurnRequest is POST /v1/channels/{channel}/turns.
	TurnRequest struct {
		Speaker SpeakerJSON `json:"speaker"`
		Text    string      `json:"text"`
		// Attachments: rich channels only (at most 10 URLs the broker
		// fetches through safefetch; refused on a sealed channel).
		Attachments []richproto.Attachment `json:"attachments,omitempty"`
	}
	// TurnResponse answers a turn; Files are a rich turn's reply files
	// (data is base64 in JSON).
	TurnResponse struct {
		OK     bool             `json:"ok"`
		Text   string           `json:"text"`
		TurnID string           `json:"turnId"`
		Files  []richproto.File `json:"files,omitempty"`
	}
	// ChannelStatus is GET /v1/channels/{channel}.
	ChannelStatus struct {
		Channel      string `json:"channel"`
		Tag          string `json:"tag"`
		Mode         string `json:"mode"`
		Queued       int    `json:"queued"`
		RunningTurn  string `json:"runningTurn,omitempty"`
		PendingFresh bool   `json:"pendingFresh"`
		// Standby is the channel's standby: none, preparing or ready
		// ("" when standbys are off); StandbyExpiresUnix its expiry.
		Standby            string `json:"standby,omitempty"`
		StandbyExpiresUnix int64  `json:"standbyExpiresUnix,omitempty"`
		// Profile is a rich channel's profile; Rich its session (mode rich).
		Profile string      `json:"profile,omitempty"`
		Rich    *RichStatus `json:"rich,omitempty"`
		// Admission is the host's, shown with one channel's status
		// (GET /v1/channels/{channel}; not in the list).
		Admission *AdmissionStatus `json:"admission,omitempty"`
	}
	// AdmissionStatus is what every channel's turns are admitted under.
	AdmissionStatus struct {
		// GlobalConcurrency is the cap on what runs at once across
		// channels; Derived when queue.globalConcurrency is 0, Why how.
		GlobalConcurrency int    `json:"globalConcurrency"`
		Derived           bool   `json:"derived"`
		Why               string `json:"why"`
		MaxWaitSeconds    int    `json:"maxWaitSeconds"`
		Running           int    `json:"running"`
		Waiting           int    `json:"waiting"`
	}
	// ChannelList is GET /v1/channels.
	ChannelList struct {
		Channels []ChannelStatus `json:"channels"`
	}
	// ModeRequest is PUT /v1/channels/{channel}/mode.
	ModeRequest struct {
		Mode string `json:"mode"`
		// Profile names a configured profile; required for mode "rich",
		// refused for the others.
		Profile string `json:"profile,omitempty"`
	}
	// CancelResponse answers POST /v1/channels/{channel}/cancel.
	CancelResponse struct {
		Channel   string `json:"channel"`
		Cancelled bool   `json:"cancelled"`
		TurnID    string `json:"turnId,omitempty"`
	}
	// ActiveTurn is one entry of GET /v1/turns (sandbox.Listed).
	ActiveTurn = sandbox.Listed
	// TurnList is GET /v1/turns.
	TurnList struct {
		Turns []ActiveTurn `json:"turns"`
	}
	// Health is GET /v1/health.
	Health struct {
		Status    string `json:"status"`
		Version   string `json:"version"`
		Accepting bool   `json:"accepting"`
		Running   int    `json:"running"`
		Waiting   int    `json:"waiting"`
		// Role is the caller's own role (none, client or admin), from its
		// peer credentials: what `sandbox-host mcp` checks before it
		// serves on a TCP port.
		Role string `json:"role"`
	}
	// ErrorResponse is every 4xx/5xx body.
	ErrorResponse struct {
		Error string `json:"error"`
	}
)

// handler serves one route; param is the path's parameter (routes.go).
type handler func(w http.ResponseWriter, r *http.Request, param string) error

func (h *Host) fail(w http.ResponseWriter, err error) {
	status, reason := statusOf(err)
	h.metrics.refused.WithLabelValues(fmt.Sprint(status)).Inc()
	writeJSON(w, status, ErrorResponse{Error: reason})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// decodeBody reads one bounded, strict JSON object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeBodyN(w, r, v, MaxBodyBytes)
}

// decodeBodyN is decodeBody with its own bound.
func decodeBodyN(w http.ResponseWriter, r *http.Request, v any, max int64) error {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(BodyReadTimeout))
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	rc.SetReadDeadline(time.Time{}) // the turn may run for minutes
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return ErrTooLarge
		}
		return badRequest("could not read the request body")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			return badRequest("unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return badRequest("bad JSON: the body must be one JSON object of the documented shape")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("bad JSON: trailing data after the object")
	}
	return nil
}

func checkField(name, v string, max int) error {
	if !utf8.ValidString(v) {
		return badRequest(name + " must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(v); n > max {
		return badRequest(fmt.Sprintf("%s is %d characters; the limit is %d", name, n, max))
	}
	return nil
}

func (h *Host) handleTurn(w http.ResponseWriter, r *http.Request, channel string) error {
	if !h.accepting() {
		return ErrShuttingDown
	}
	// A rich channel's turn may carry the seed's 100,000 characters (up to
	// 6 bytes each escaped); a sealed one 32,000 within MaxBodyBytes.
	maxBody, maxText := int64(MaxBodyBytes), protocol.MaxTextChars
	if h.state.Mode(channel) == ModeRich {
		maxBody, maxText = MaxRichBodyBytes, richproto.MaxTextChars
	}
	var req TurnRequest
	if err := decodeBodyN(w, r, &req, maxBody); err != nil {
		return err
	}
	if req.Speaker.ID == "" {
		return badRequest("speaker.id is required")
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"text", req.Text, maxText},
		{"speaker.id", req.Speaker.ID, protocol.MaxIDChars},
		{"speaker.name", req.Speaker.Name, protocol.MaxIDChars},
		{"speaker.principalId", req.Speaker.PrincipalID, protocol.MaxIDChars},
	} {
		if err := checkField(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	mode := h.state.Mode(channel)
	if mode != ModeOn && mode != ModeRich {
		return ErrModeOff
	}
	if len(req.Attachments) > 0 && mode != ModeRich {
		return badRequest("attachments need a rich channel")
	}
	if err := richproto.ValidAttachments(req.Attachments); err != nil {
		return badRequest(strings.TrimSuffix(err.Error(), ": "+richproto.ErrInvalid.Error()))
	}
	for i, a := range req.Attachments {
		// The broker's fetcher would refuse it anyway (encoded IPv4, an
		// odd host form): say so now, before a turn is spent on it.
		if _, err := safefetch.ParseURL(a.URL); err != nil {
			return badRequest(fmt.Sprintf("attachments[%d].url is not fetchable: a credential-free http(s) URL with a DNS name or a canonical IP address", i))
		}
	}
	// Waiting ends when the client goes away or the host stops.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer stop()
	release, err := h.admitTurn(ctx, channel)
	if err != nil {
		return err
	}
	// The slot is released only when RunTurn returned, that is after the
	// turn's cleanup, even when the client was answered before it.
	defer release()
	// A successful run is answered as soon as its reply is read and the
	// container exited; removal, unit stop and file removal go on while the
	// channel's slot stays held, so the channel's next turn still waits for
	// them and shutdown still waits for them (RunTurn holds the host's turn
	// count). Trade-off: a cleanup failure after that answer cannot turn it
	// into an error any more; RunTurn logs it with what to inspect and
	// counts it in sandbox_cleanup_failures_total. Failed turns are answered
	// after cleanup, as before.
	replied := false
	var files []richproto.File
	run := h.RunTurn
	if mode == ModeRich {
		run = h.RunRichTurn
	}
	reply, turnID, err := run(ctx, TurnInput{
		Channel: channel, SpeakerID: req.Speaker.ID, SpeakerName: req.Speaker.Name,
		PrincipalID: req.Speaker.PrincipalID, Text: req.Text, Attachments: req.Attachments,
		OnFiles: func(f []richproto.File) { files = f },
		OnReply: func(reply *protocol.Reply, turnID string) {
			replied = true // same goroutine as RunTurn's caller
			h.writeReply(w, r, reply, turnID, files)
		},
	})
	if replied {
		return nil // the response is complete: nothing more may be written
	}
	if err != nil {
		if turnID != "" {
			w.Header().Set("X-Sandbox-Turn", turnID)
		}
		return err
	}
	// RunTurn succeeded without calling OnReply: not expected, but the
	// client must still get its answer.
	h.writeReply(w, r, reply, turnID, files)
	return nil
}

// writeReply writes a turn's 200 response whole, with its length, and flushes
// it, so the client has the complete body while the handler still runs the
// turn's cleanup.
func (h *Host) writeReply(w http.ResponseWriter, r *http.Request, reply *protocol.Reply, turnID string, files []richproto.File) {
	// Streamed from the files' bytes (replyfiles.go): the answer is never
	// held whole beside them.
	body, err := newTurnAnswer(TurnResponse{OK: reply.OK, Text: reply.Text, TurnID: turnID, Files: files})
	if err != nil { // strings, bytes and a bool: cannot happen
		h.fail(w, fmt.Errorf("encode reply: %w", err))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Length", strconv.FormatInt(body.Len(), 10))
	// The server reads this connection's next request only once the handler
	// returned, after cleanup: a client reusing it would wait for that
	// cleanup. Closing it sends the client's next request (another
	// channel's turn, a status call) to a fresh connection.
	hd.Set("Connection", "close")
	// A rich answer may carry 67 MiB of reply files: a client that stops
	// reading must not hold the turn (and the channel) forever.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(replyWriteTimeout))
	w.WriteHeader(http.StatusOK)
	if _, err := body.WriteTo(w); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The client's fault, and the turn's answer is lost: say so.
			h.log.Warn("turn answer cut: the client stopped reading", "turn", turnID,
				"peer_uid", peerFrom(r.Context()).UID, "write_timeout_s", replyWriteTimeout.Seconds())
			return
		}
		h.log.Debug("turn reply not delivered", "turn", turnID, "err", err) // the client left
		return
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func (h *Host) status(channel string) ChannelStatus {
	st := ChannelStatus{Channel: channel, Tag: ids.ChannelTag(channel), Mode: h.state.Mode(channel), Queued: h.queue.waitingFor(channel)}
	h.mu.Lock()
	if a, ok := h.active[channel]; ok {
		st.RunningTurn = a.id
	}
	_, st.PendingFresh = h.fresh[channel]
	h.mu.Unlock()
	if st.Mode == ModeRich {
		st.Profile = h.state.Profile(channel)
		st.Rich = h.richStatus(channel)
	}
	if h.standbys != nil && st.Mode != ModeRich {
		sb := h.standbys.State(channel)
		st.Standby = sb.State
		if !sb.Expiry.IsZero() {
			st.StandbyExpiresUnix = sb.Expiry.Unix()
		}
	}
	return st
}

func (h *Host) handleChannel(w http.ResponseWriter, r *http.Request, channel string) error {
	st := h.status(channel)
	waiting, running := h.queue.totals()
	st.Admission = &AdmissionStatus{GlobalConcurrency: h.admission.Cap, Derived: h.admission.Derived, Why: h.admission.Why,
		MaxWaitSeconds: h.cfg.Queue.MaxWaitSeconds, Running: running, Waiting: waiting}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (h *Host) handleChannels(w http.ResponseWriter, r *http.Request, _ string) error {
	seen := map[string]bool{}
	names := h.state.Channels()
	for _, ch := range names {
		seen[ch] = true
	}
	for _, ch := range h.queue.channels() {
		if !seen[ch] && !h.queueOnly(ch) {
			names = append(names, ch)
			seen[ch] = true
		}
	}
	sort.Strings(names)
	out := ChannelList{Channels: make([]ChannelStatus, 0, len(names))}
	for _, ch := range names {
		out.Channels = append(out.Channels, h.status(ch))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Host) handleMode(w http.ResponseWriter, r *http.Request, channel string) error {
	var req ModeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	var err error
	switch req.Mode {
	case ModeOn, ModeOff:
		if req.Profile != "" {
			return badRequest(`profile is for mode "rich" only`)
		}
		err = h.state.SetMode(channel, req.Mode)
	case ModeRich:
		if !h.cfg.Rich.Enabled {
			return badRequest("rich channels are disabled (rich.enabled)")
		}
		if _, ok := h.cfg.Profile(req.Profile); !ok {
			return badRequest("profile must name a configured profile")
		}
		err = h.state.SetRich(channel, req.Profile)
	default:
		return badRequest(`mode must be "on", "off" or "rich"`)
	}
	if err != nil {
		h.log.Error("state write failed", "channel", ids.ChannelTag(channel), "err", err)
		return errors.New("state write failed")
	}
	h.log.Info("channel mode changed", "channel", ids.ChannelTag(channel), "mode", req.Mode, "profile", req.Profile)
	if req.Mode == ModeOff {
		h.sealed.Drop(channel, standby.ReasonChannelOff)
		h.delegations.CancelChannel(channel)
	}
	if req.Mode == ModeRich {
		h.sealed.Drop(channel, standby.ReasonChannelOff)
	}
	// Another mode, or another profile: the session goes now (a running
	// turn keeps it until it settles, then the next turn starts anew).
	h.rich.StopIdle(channel, req.Mode, req.Profile, req.Mode == ModeRich)
	writeJSON(w, http.StatusOK, h.status(channel))
	return nil
}

// handleFresh marks the channel's next turn to start without history
// (process-local, cleared after the next successful turn, as in the seeds).
func (h *Host) handleFresh(w http.ResponseWriter, r *http.Request, channel string) error {
	h.mu.Lock()
	h.freshGen++
	h.fresh[channel] = h.freshGen
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, h.status(channel))
	return nil
}

func (h *Host) handleCancel(w http.ResponseWriter, r *http.Request, channel string) error {
	h.mu.Lock()
	a, ok := h.active[channel]
	replied := ok && a.replied
	h.mu.Unlock()
	resp := CancelResponse{Channel: channel}
	// A turn already answered is only cleaning up: nothing to cancel.
	if ok && !replied {
		a.cancel(errCauseCancel)
		resp.Cancelled, resp.TurnID = true, a.id
		h.log.Info("turn cancel requested", "turn", a.id, "channel", ids.ChannelTag(channel))
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// ActiveTurns lists running turns and standbys (the reaper keeps what this
// lists). A standby being bound may be listed twice for a moment: once.
func (h *Host) ActiveTurns() []ActiveTurn {
	var warm []standby.Listed
	if h.standbys != nil {
		warm = h.standbys.Turns()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ActiveTurn, 0, len(h.active)+len(warm))
	seen := map[string]bool{}
	for _, a := range h.active {
		seen[a.id] = true
		out = append(out, ActiveTurn{ID: a.id, ChannelTag: ids.ChannelTag(a.channel), DeadlineUnix: a.deadline.Unix(), DeadlineUnixMs: a.deadline.UnixMilli()})
	}
	for _, w := range warm {
		if seen[w.TurnID] {
			continue
		}
		out = append(out, ActiveTurn{ID: w.TurnID, ChannelTag: ids.ChannelTag(w.Channel), DeadlineUnix: w.Expiry.Unix(), DeadlineUnixMs: w.Expiry.UnixMilli(), Standby: w.State})
	}
	// Unfinished code runs too: the reaper's contract is that the host lists
	// a turn (a run is one to the reaper) from before it writes anything
	// until after everything of it is gone, and a run finishes only after
	// its cleanup.
	out = append(out, h.coderun.Listed()...)
	out = append(out, h.richListed()...)
	out = append(out, h.delegations.Listed()...)
	out = append(out, h.prechecks.Listed()...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (h *Host) handleTurns(w http.ResponseWriter, r *http.Request, _ string) error {
	writeJSON(w, http.StatusOK, TurnList{Turns: h.ActiveTurns()})
	return nil
}

func (h *Host) handleHealth(w http.ResponseWriter, r *http.Request, _ string) error {
	waiting, running := h.queue.totals()
	hl := Health{Status: "ok", Version: version.Version, Accepting: h.accepting(), Running: running, Waiting: waiting,
		Role: Authorize(h.opts.Access, h.opts.UID, peerFrom(r.Context())).String()}
	status := http.StatusOK
	if !hl.Accepting {
		hl.Status, status = "stopping", http.StatusServiceUnavailable
	}
	writeJSON(w, status, hl)
	return nil
}

func (h *Host) handleMetrics(w http.ResponseWriter, r *http.Request, _ string) error {
	promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{Timeout: 10 * time.Second}).ServeHTTP(w, r)
	return nil
}
