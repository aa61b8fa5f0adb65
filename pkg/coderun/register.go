package coderun

import (
	"net/http"
	"regexp"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// Registration registers code runs with the host: the /v1/runs routes,
// their {run} parameter and the statuses of the run API's refusals.
var Registration = kind.Registration{
	Name: "coderun", New: register, Zero: (*Kind)(nil),
	Statuses: []api.Status{
		{Err: runs.ErrInvalid, Code: http.StatusBadRequest},
		{Err: runs.ErrNotFound, Code: http.StatusNotFound, Reason: "no such run"},
		{Err: runs.ErrState, Code: http.StatusConflict, Reason: "the run is not in a state that allows this"},
		{Err: runs.ErrBusy, Code: http.StatusTooManyRequests},
		{Err: ErrJobTooLarge, Code: http.StatusBadRequest},
		{Err: ErrRunsDisabled, Code: http.StatusConflict, Reason: ErrRunsDisabled.Error()},
		{Err: fleetjobs.ErrAdmitterAway, Code: http.StatusServiceUnavailable, Reason: fleetjobs.ErrAdmitterAway.Error()},
	},
	Params: []api.Param{{Name: "{run}", Valid: regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString, Reason: "bad run id: 32 lowercase hex characters"}},
}

func register(d kind.Deps) (kind.Kind, error) {
	return New(Options{
		Config: d.Config, Lifecycle: d.Lifecycle, Host: d.Host, Logger: d.Logger, Now: d.Now, Lchown: d.Lchown,
		Registry: d.Registry, Fleet: d.Fleet, Box: d.Config.Fleet.Box,
	}), nil
}
