package sandbox

import (
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// TestForCountsUnderItsKind: a kind's lifecycle (For) counts its cleanup
// failures under its name and the stage that failed, and a shutdown's
// Abandon on the host's lifecycle reaches it.
func TestForCountsUnderItsKind(t *testing.T) {
	var got []string
	u := &scriptedUnits{script: []error{errors.New("dbus gone"), errors.New("dbus gone"), errors.New("dbus gone")}}
	host := New(Options{Units: u, Logger: slog.New(slog.DiscardHandler), UnitStopTimeout: 20 * time.Millisecond,
		RemoveTimeout: 20 * time.Millisecond, RemoveRetryDelay: time.Millisecond,
		CleanupFailed: func(kind, stage string) { got = append(got, kind+"/"+stage) }})
	runs := host.For("coderun")
	b := &Handle{ID: "0123456789abcdef0123456789abcdef", UnitTried: true}
	if err := runs.Cleanup(b, slog.New(slog.DiscardHandler)); !errors.Is(err, ErrCleanup) {
		t.Fatalf("Cleanup = %v, want ErrCleanup", err)
	}
	runs.CountCleanupFailure("scratch")
	host.CountCleanupFailure("policy")
	if want := []string{"coderun/units", "coderun/scratch", "/policy"}; !slices.Equal(got, want) {
		t.Errorf("counted %v, want %v", got, want)
	}
	host.Abandon(errors.New("shutdown out of time"))
	if runs.cleanupCtx.Err() == nil {
		t.Error("Abandon on the host's lifecycle did not reach the kind's")
	}
}
