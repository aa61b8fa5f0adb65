package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
	"github.com/roundtable-sandbox/sandbox/pkg/turnanswer"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

func (h *Host) fail(w http.ResponseWriter, err error) {
	status, reason := statusOf(err)
	h.metrics.refused.WithLabelValues(fmt.Sprint(status)).Inc()
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter(err, h.cfg.QueueWait()))
	}
	writeJSON(w, status, apiwire.ErrorResponse{Error: reason})
}

func writeJSON(w http.ResponseWriter, status int, v any) { api.WriteJSON(w, status, v) }

// decodeBody reads one bounded, strict JSON object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return api.DecodeBody(w, r, v, api.MaxBodyBytes)
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

// waitForSlot waits for channel's slot, at most queue.maxWaitSeconds. A turn
// that cannot be admitted (its channel's queue full, or no slot in time)
// is refused at once with a 429 (ErrQueueFull, ErrBusy) and never runs:
// its deadline, which starts when it holds the slot, is never spent
// waiting.
func (h *Host) waitForSlot(ctx context.Context, channel string) (func(), error) {
	since := h.opts.Now()
	release, err := h.queue.AcquireWithin(ctx, channel, h.cfg.QueueWait())
	switch {
	case err == nil:
		return release, nil
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrBusy):
		waiting, running := h.queue.Totals()
		h.log.Warn("turn refused: host busy", "channel", ids.ChannelTag(channel), "err", err,
			"waited_ms", h.opts.Now().Sub(since).Milliseconds(), "global_concurrency", h.admission.Cap,
			"running", running, "waiting", waiting, "queue_depth", h.cfg.Queue.Depth, "queue_max_wait_s", h.cfg.Queue.MaxWaitSeconds)
		return nil, err
	case errors.Is(err, ErrShuttingDown):
		return nil, err
	}
	return nil, ErrClientGone
}

// Admission is the global concurrency in force (doctor, channel status).
func (h *Host) Admission() config.Concurrency { return h.admission }

func (h *Host) handleTurn(w http.ResponseWriter, r *http.Request, channel string) error {
	// A rich channel's turn may carry the seed's 100,000 characters (up to
	// 6 bytes each escaped); a sealed one 32,000 within MaxBodyBytes.
	maxBody, maxText := int64(api.MaxBodyBytes), protocol.MaxTextChars
	if h.state.Mode(channel) == ModeRich {
		maxBody, maxText = MaxRichBodyBytes, richproto.MaxTextChars
	}
	var req apiwire.TurnRequest
	if err := api.DecodeBody(w, r, &req, maxBody); err != nil {
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
	if h.fleet != nil && mode == ModeOn {
		// fleet.go: the turn runs on its partition's box.
		reply, turnID, err := h.askFleet(r, channel, req)
		if err != nil {
			if turnID != "" { // "": refused before it was published
				w.Header().Set("X-Sandbox-Turn", turnID)
			}
			return err
		}
		h.writeReply(w, r, reply, turnID, nil)
		return nil
	}
	// Waiting ends when the client goes away or the host stops.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer stop()
	release, err := h.waitForSlot(ctx, channel)
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
	reply, turnID, err := h.runTurn(ctx, mode, TurnInput{
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

// writeReply writes a turn's 200 response (pkg/turnanswer), within
// api.WriteTimeout.
func (h *Host) writeReply(w http.ResponseWriter, r *http.Request, reply *protocol.Reply, turnID string, files []richproto.File) {
	a := apiwire.Reply{OK: reply.OK, Text: reply.Text, TurnID: turnID, Files: files}
	if err := turnanswer.Write(w, a, api.WriteTimeout, h.log, peerFrom(r.Context()).UID); err != nil {
		h.fail(w, fmt.Errorf("encode reply: %w", err))
	}
}

func (h *Host) status(channel string) apiwire.Channel {
	st := apiwire.Channel{Channel: channel, Tag: ids.ChannelTag(channel), Mode: h.state.Mode(channel), Queued: h.queue.WaitingFor(channel)}
	h.mu.Lock()
	if a, ok := h.active[channel]; ok {
		st.RunningTurn = a.id
	}
	_, st.PendingFresh = h.fresh[channel]
	h.mu.Unlock()
	if st.Mode == ModeRich {
		st.Profile = h.state.Profile(channel)
	}
	for _, k := range h.kinds {
		r, ok := k.(kind.Reporter)
		if !ok {
			continue
		}
		rep := r.ChannelReport(channel, st.Mode)
		if rep.Session != nil {
			st.Rich = rep.Session
		}
		if rep.Standby != "" {
			st.Standby = rep.Standby
		}
		if !rep.StandbyExpires.IsZero() {
			st.StandbyExpiresUnix = rep.StandbyExpires.Unix()
		}
	}
	return st
}

func (h *Host) handleChannel(w http.ResponseWriter, r *http.Request, channel string) error {
	st := h.status(channel)
	waiting, running := h.queue.Totals()
	startWaiting, starting := h.starts.Totals()
	st.Admission = &apiwire.Admission{GlobalConcurrency: h.admission.Cap, Derived: h.admission.Derived, Why: h.admission.Why,
		MaxWaitSeconds: h.cfg.Queue.MaxWaitSeconds, Running: running, Waiting: waiting,
		StartConcurrency: h.startAdm.Cap, StartDerived: h.startAdm.Derived, StartWhy: h.startAdm.Why, Starting: starting, StartWaiting: startWaiting}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (h *Host) handleChannels(w http.ResponseWriter, r *http.Request, _ string) error {
	seen := map[string]bool{}
	names := h.state.Channels()
	for _, ch := range names {
		seen[ch] = true
	}
	for _, ch := range h.queue.Channels() {
		// A run's, job's or precheck's own entry is no channel.
		if !seen[ch] && !ids.Internal(ch) {
			names = append(names, ch)
			seen[ch] = true
		}
	}
	sort.Strings(names)
	out := apiwire.ChannelList{Channels: make([]apiwire.Channel, 0, len(names))}
	for _, ch := range names {
		out.Channels = append(out.Channels, h.status(ch))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Host) handleMode(w http.ResponseWriter, r *http.Request, channel string) error {
	var req apiwire.ModeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	// Off is the host's; every other mode is a kind's, which checks it.
	if tk, ok := h.turnKinds[req.Mode]; ok {
		if err := tk.CheckMode(req.Profile); err != nil {
			return badRequest(err.Error())
		}
	} else if req.Mode != ModeOff {
		return badRequest(`mode must be "on", "off" or "rich"`)
	} else if req.Profile != "" {
		return badRequest(`profile is for mode "rich" only`)
	}
	if err := h.fl.SetMode(r.Context(), channel, req.Mode, req.Profile); err != nil { // fleet mode: written first
		return err
	}
	var err error
	if req.Mode == ModeRich {
		err = h.state.SetRich(channel, req.Profile)
	} else {
		err = h.state.SetMode(channel, req.Mode)
	}
	if err != nil {
		h.log.Error("state write failed", "channel", ids.ChannelTag(channel), "err", err)
		return errors.New("state write failed")
	}
	h.log.Info("channel mode changed", "channel", ids.ChannelTag(channel), "mode", req.Mode, "profile", req.Profile)
	h.channelMode(channel, req.Mode, req.Profile)
	writeJSON(w, http.StatusOK, h.status(channel))
	return nil
}

// channelMode lets each kind go of what it keeps for the channel in its
// old mode (a standby, unfinished jobs, a session of another profile).
func (h *Host) channelMode(channel, mode, profile string) {
	for _, k := range h.kinds {
		if w, ok := k.(kind.ModeWatcher); ok {
			w.ChannelMode(channel, mode, profile)
		}
	}
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
	resp := apiwire.Cancel{Channel: channel}
	// A turn already answered is only cleaning up: nothing to cancel.
	if ok && !replied {
		a.cancel(errCauseCancel)
		resp.Cancelled, resp.TurnID = true, a.id
		h.log.Info("turn cancel requested", "turn", a.id, "channel", ids.ChannelTag(channel))
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// ActiveTurns lists running turns and every kind's sandboxes (the reaper
// keeps what this lists). An id is listed once: a standby being bound is
// also its turn.
func (h *Host) ActiveTurns() []apiwire.Turn {
	h.mu.Lock()
	out := make([]apiwire.Turn, 0, len(h.active))
	for _, a := range h.active {
		out = append(out, apiwire.Turn{ID: a.id, ChannelTag: ids.ChannelTag(a.channel), DeadlineUnix: a.deadline.Unix(), DeadlineUnixMs: a.deadline.UnixMilli()})
	}
	h.mu.Unlock()
	seen := map[string]bool{}
	for _, a := range out {
		seen[a.ID] = true
	}
	for _, k := range h.kinds {
		lister, ok := k.(kind.Lister)
		if !ok {
			continue
		}
		for _, l := range lister.Listed() {
			if !seen[l.ID] {
				seen[l.ID] = true
				out = append(out, l)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (h *Host) handleTurns(w http.ResponseWriter, r *http.Request, _ string) error {
	writeJSON(w, http.StatusOK, apiwire.TurnList{Turns: h.ActiveTurns()})
	return nil
}

func (h *Host) handleHealth(w http.ResponseWriter, r *http.Request, _ string) error {
	waiting, running := h.queue.Totals()
	hl := apiwire.Health{Status: "ok", Version: version.Version, Accepting: h.accepting(), Running: running, Waiting: waiting,
		Role: api.RoleOf(r).String()}
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
