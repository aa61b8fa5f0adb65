package precheckrun

import (
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// Registration registers prechecks with the host: POST /v1/prechecks and
// the statuses of its refusals (a Refusal answers its kind's status with
// its own reason).
var Registration = kind.Registration{
	Name: "precheckrun", New: register, Zero: (*Kind)(nil),
	Statuses: []api.Status{
		{Err: ErrDisabled, Code: http.StatusConflict, Reason: ErrDisabled.Error()},
		{Err: ErrBusy, Code: http.StatusTooManyRequests, Reason: ErrBusy.Error()},
		{Err: ErrFailed, Code: http.StatusInternalServerError, Reason: ErrFailed.Error()},
		{Err: ErrInvalid, Code: http.StatusBadRequest, Reason: ErrInvalid.Error()},
		{Err: ErrForbidden, Code: http.StatusForbidden, Reason: ErrForbidden.Error()},
	},
}

func register(d kind.Deps) (kind.Kind, error) {
	return New(Options{
		Config: d.Config, Lifecycle: d.Lifecycle, Host: d.Host, Logger: d.Logger, Now: d.Now, NewID: d.NewID,
		Policy: d.Policy, Registry: d.Registry, Fleet: d.Fleet, Box: d.Config.Fleet.Box,
	}), nil
}
