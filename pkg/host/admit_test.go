package host

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAdmitTurnRefusals: a channel has one running turn; a stopping host
// admits none (its refusal first); an admitted turn is listed until end.
func TestAdmitTurnRefusals(t *testing.T) {
	tests := []struct {
		name           string
		stopping, busy bool
		want           error
	}{
		{"admitted", false, false, nil},
		{"busy channel", false, true, ErrTurnFailed},
		{"stopping", true, false, ErrShuttingDown},
		{"stopping and busy", true, true, ErrShuttingDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "", nil)
			h := r.h
			deadline := time.Now().Add(time.Minute)
			if tt.busy {
				_, _, end, err := h.admitTurn(context.Background(), "c", "0123456789abcdef0123456789abcdef", deadline)
				if err != nil {
					t.Fatal(err)
				}
				defer end()
			}
			if tt.stopping {
				h.mu.Lock()
				h.stopping = true
				h.mu.Unlock()
			}
			ctx, adm, end, err := h.admitTurn(context.Background(), "c", "fedcba9876543210fedcba9876543210", deadline)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err != nil {
				return
			}
			if got := h.status("c").RunningTurn; got != adm.active.id {
				t.Errorf("running turn %q, want %q", got, adm.active.id)
			}
			end()
			if got := h.status("c").RunningTurn; got != "" {
				t.Errorf("running turn %q after end", got)
			}
			if ctx.Err() == nil {
				t.Error("the turn's context outlives end")
			}
		})
	}
}
