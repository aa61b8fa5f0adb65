package host

// Rich channels (DESIGN.md section 13) are the richsession kind: the host
// admits a rich channel's turn (its queue slot, the channel's one running
// turn, fresh start), classifies its result and answers it; the kind owns
// the sessions.

import (
	"context"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
)

// RunRichTurn runs one admitted turn of a rich channel (the caller holds
// the channel's queue slot): it takes the channel's session (starting one
// when there is none or it cannot serve), hands the turn over the control
// route and returns the worker's reply. A failed turn stops the session, so
// the next turn starts with a new broker and a new container.
func (h *Host) RunRichTurn(ctx context.Context, in TurnInput) (*protocol.Reply, string, error) {
	start := h.opts.Now()
	prof, ok := h.cfg.Profile(h.state.Profile(in.Channel))
	if !ok || !h.cfg.Rich.Enabled {
		return nil, "", ErrRichUnavailable
	}
	id := h.opts.NewTurnID()
	tag := ids.ChannelTag(in.Channel)
	deadline := start.Add(h.cfg.RichTurnTimeout())
	ctx, adm, end, err := h.admitTurn(ctx, in.Channel, id, deadline)
	if err != nil {
		return nil, "", err
	}
	defer end()
	log := h.log.With("turn", id, "channel", tag, "profile", prof.Name)

	o := h.rich.Turn(ctx, id, richsession.Input{
		Channel: in.Channel, SpeakerID: in.SpeakerID, SpeakerName: in.SpeakerName, PrincipalID: in.PrincipalID,
		Text: in.Text, Attachments: in.Attachments,
	}, prof, deadline, adm.reset, log)
	defer o.Release() // the files' bytes, once the answer is written
	reply, files, warm, runErr, cleanupErr := o.Reply, o.Files, o.Warm, o.RunErr, o.CleanupErr
	result, err := resultOf(ctx, reply, runErr, cleanupErr)
	if runErr != nil {
		log.Warn("rich turn failed", "result", result, "err", runErr)
	}
	h.settleFresh(in.Channel, adm, err == nil && reply.OK)
	took := h.countTurn(result, start)
	h.rich.CountTurn(result, warm)
	if err != nil {
		return nil, id, err
	}
	log.Info("turn done", "result", result, "duration_ms", took.Milliseconds(), "rich", true, "warm", warm)
	if in.OnFiles != nil && len(files) > 0 {
		in.OnFiles(files)
	}
	if in.OnReply != nil {
		in.OnReply(reply, id)
	}
	return reply, id, nil
}
