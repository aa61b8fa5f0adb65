package host

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
)

func TestStatusOfFleetModeErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("set mode: %w", fleetside.ErrModeContended), http.StatusConflict},
		{fleetside.ErrModeWrite, http.StatusInternalServerError},
	} {
		if got, reason := statusOf(tc.err); got != tc.want {
			t.Errorf("statusOf(%v) = %d %q, want %d", tc.err, got, reason, tc.want)
		}
	}
}
