package delegationrun

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// Registration registers delegated jobs with the host: the delegation
// and job routes, their {job} parameter and the statuses of the seed's
// refusals. A job's research turn is run by the kind that offers
// kind.Researcher (the sealed turn), registered before this one.
var Registration = kind.Registration{
	Name: "delegationrun", New: register, Zero: (*Kind)(nil),
	Statuses: []api.Status{
		{Err: delegation.ErrBusy, Code: http.StatusTooManyRequests},
		{Err: delegation.ErrRefused, Code: http.StatusBadRequest},
		{Err: delegation.ErrNotFound, Code: http.StatusNotFound, Reason: "no such job"},
		{Err: ErrDisabled, Code: http.StatusConflict, Reason: ErrDisabled.Error()},
	},
	Params: []api.Param{{Name: "{job}", Valid: func(s string) bool { return ids.ValidTurnID(s) == nil }, Reason: "bad job id: 32 lowercase hex characters"}},
}

func register(d kind.Deps) (kind.Kind, error) {
	var research kind.Researcher
	for _, m := range d.Made {
		if r, ok := m.(kind.Researcher); ok {
			research = r
		}
	}
	if research == nil && d.Config.Delegation.Enabled {
		return nil, errors.New("host: delegation is enabled but no kind runs research turns")
	}
	k := New(Options{
		Config: d.Config, Lifecycle: d.Lifecycle, Host: d.Host, Logger: d.Logger, Now: d.Now, NewID: d.NewID,
		UID: d.UID, GID: d.GID, Registry: d.Registry, Fleet: d.Fleet, Box: d.Config.Fleet.Box,
		Research: func(ctx context.Context, j *delegation.Job, scratch string, log *slog.Logger) Research {
			return research.Research(ctx, kind.ResearchJob{
				ID: j.ID(), Channel: j.Channel(), Author: j.Author(), Text: ResearchText(j.Title(), j.Task()),
				Deadline: j.Deadline(), Scratch: scratch,
			}, log)
		},
	})
	if d.Config.Delegation.Enabled {
		// Leftover scratch workspaces of an earlier run.
		k.SweepScratch()
	}
	return k, nil
}
