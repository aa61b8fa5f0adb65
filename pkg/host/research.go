package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/delegationrun"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
)

// Scoped delegation (DESIGN.md section 14) is the delegationrun kind. A job
// runs one research turn of its channel, which is a sealed turn: the
// turn's lifecycle (execute, cleanup), container, broker, confinement,
// guest uid and identity binding (the author as the speaker), with what
// differs carried by researchTurn: only the fetch and search tools (in the
// worker's turn and in the broker's policy), no MCP server, the research
// prompt, the job's deadline, and the job's scratch workspace, so a job
// never sees or changes the channel's memory or history and never races
// the channel's turns. The host hands the kind runResearch.

// runResearch runs j's research turn (a sealed turn with the research
// tools, prompt and scratch workspace) and cleans it up.
func (h *Host) runResearch(ctx context.Context, j *delegation.Job, scratch string, log *slog.Logger) delegationrun.Research {
	a := j.Author()
	r := h.research
	r.Scratch = scratch
	t := &sealedturn.Turn{
		Handle:    sandbox.Handle{ID: j.ID(), Channel: j.Channel(), Tag: ids.ChannelTag(j.Channel()), Deadline: j.Deadline(), Quiet: true},
		Speaker:   protocol.Speaker{ID: a.ID, Name: a.Name},
		Principal: a.PrincipalID, Text: delegationrun.ResearchText(j.Title(), j.Task()),
		Reset: true, Research: &r,
	}
	var res delegationrun.Research
	res.Reply, res.RunErr = h.sealed.Execute(ctx, t)
	var exit *sealedturn.ExitError
	if errors.As(res.RunErr, &exit) {
		res.Exited, res.ExitCode, res.WorkerCause = true, exit.Status, exit.Cause
	}
	res.CleanupErr = h.sealed.Cleanup(t, log)
	return res
}

// newDelegation prepares the job registry and the research tool set and
// validates a sample research turn; leftover scratch workspaces of an
// earlier run are removed.
func (h *Host) newDelegation() error {
	d := h.cfg.Delegation
	h.delegations = delegationrun.New(delegationrun.Options{
		Config: h.cfg, Lifecycle: h.life, Host: kindHost{h}, Logger: h.log, Now: h.opts.Now, NewID: h.opts.NewTurnID,
		UID: h.opts.UID, GID: h.opts.GID, Research: h.runResearch, Registry: h.reg, Fleet: h.fleet, Box: h.cfg.Fleet.Box,
	})
	if !d.Enabled {
		return nil
	}
	h.research.Prompt = d.Prompt
	for i, t := range h.cfg.Tools {
		if t.Name == d.FetchTool || (d.SearchTool != "" && t.Name == d.SearchTool) {
			h.research.Tools = append(h.research.Tools, h.tools[i])
			h.research.Policy = append(h.research.Policy, h.pol.Tools[i])
		}
	}
	if len(h.research.Tools) == 0 {
		return fmt.Errorf("host: delegation.fetchTool %q is not a configured tool", d.FetchTool)
	}
	r := h.research
	sample := &sealedturn.Turn{Handle: sandbox.Handle{ID: ids.NewTurnID(), Channel: ids.PreflightChannel}, Speaker: protocol.Speaker{ID: "preflight"}, Research: &r}
	if err := h.sealed.PolicyFor(sample, h.opts.Now().Add(time.Duration(d.TimeoutSeconds)*time.Second)).Validate(); err != nil {
		return fmt.Errorf("host: delegation makes an invalid broker policy: %w", err)
	}
	if _, err := h.sealed.TurnJSON(sample, true); err != nil {
		return fmt.Errorf("host: delegation makes an invalid worker turn: %w", err)
	}
	h.delegations.SweepScratch()
	return nil
}
