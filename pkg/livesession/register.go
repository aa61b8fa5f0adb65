package livesession

import (
	"net/http"
	"regexp"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// Registration registers sessions with the host: the /v1/sessions routes,
// their {session} parameter and the statuses of their refusals.
var Registration = kind.Registration{
	Name: "livesession", New: register, Zero: (*Kind)(nil),
	Statuses: []api.Status{
		{Err: ErrInvalid, Code: http.StatusBadRequest},
		{Err: ErrNotFound, Code: http.StatusNotFound},
		{Err: ErrFileNotFound, Code: http.StatusNotFound, Reason: ErrFileNotFound.Error()},
		{Err: ErrState, Code: http.StatusConflict},
		{Err: ErrEnded, Code: http.StatusConflict, Reason: ErrEnded.Error()},
		{Err: ErrDisabled, Code: http.StatusConflict},
		{Err: ErrBusy, Code: http.StatusTooManyRequests},
		{Err: ErrTooLarge, Code: http.StatusRequestEntityTooLarge},
		{Err: ErrSupervisor, Code: http.StatusBadGateway},
	},
	Params: []api.Param{{Name: "{session}", Valid: regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString, Reason: "bad session id: 32 lowercase hex characters"}},
}

func register(d kind.Deps) (kind.Kind, error) {
	return New(Options{
		Config: d.Config, Lifecycle: d.Lifecycle, Host: d.Host, Logger: d.Logger, Now: d.Now, NewID: d.NewID,
		Registry: d.Registry,
	}), nil
}
