package sandbox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// scriptedUnits answers StopBroker from a script: a nil entry succeeds,
// errBlock waits for the attempt's bound, anything else fails at once.
type scriptedUnits struct {
	mu     sync.Mutex
	script []error
	calls  int
	bounds []bool // whether each attempt's ctx had a deadline
}

var errBlock = errors.New("block until the attempt's bound")

func (u *scriptedUnits) StartBroker(context.Context, string) error        { return nil }
func (u *scriptedUnits) StartBrokerService(context.Context, string) error { return nil }
func (u *scriptedUnits) StopBroker(ctx context.Context, _ string) error {
	u.mu.Lock()
	i := u.calls
	u.calls++
	_, has := ctx.Deadline()
	u.bounds = append(u.bounds, has)
	var err error
	if i < len(u.script) {
		err = u.script[i]
	}
	u.mu.Unlock()
	if errors.Is(err, errBlock) {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func TestStopUnitsRetriesThenHandsToTheReaper(t *testing.T) {
	busy := errors.New("systemd d-bus call failed")
	tests := []struct {
		name      string
		script    []error
		abandon   bool
		wantCalls int
		wantErr   bool
		wantLog   string
	}{
		{"first stop works", []error{nil}, false, 1, false, ""},
		{"a stop that timed out is retried", []error{errBlock, nil}, false, 2, false, "broker units stopped after retries"},
		{"two failures, then it works", []error{busy, errBlock, nil}, false, 3, false, "broker units stopped after retries"},
		{"every attempt fails: left to the reaper", []error{errBlock, busy, errBlock, nil}, false, UnitStopAttempts, true, "left to sandbox-reaper"},
		{"after Abandon: one attempt", []error{errBlock, nil}, true, 1, true, "left to sandbox-reaper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &scriptedUnits{script: tt.script}
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			l := New(Options{Units: u, Logger: log, UnitStopTimeout: 20 * time.Millisecond,
				RemoveTimeout: 20 * time.Millisecond, RemoveRetryDelay: time.Millisecond})
			if tt.abandon {
				l.Abandon(errors.New("shutdown out of time"))
			}
			err := l.StopUnits("0123456789abcdef0123456789abcdef", log)
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, want error %v", err, tt.wantErr)
			}
			if u.calls != tt.wantCalls {
				t.Errorf("StopBroker called %d times, want %d", u.calls, tt.wantCalls)
			}
			for i, has := range u.bounds {
				if !has {
					t.Errorf("attempt %d had no deadline", i+1)
				}
			}
			if tt.wantLog != "" && !strings.Contains(buf.String(), tt.wantLog) {
				t.Errorf("log lacks %q:\n%s", tt.wantLog, buf.String())
			}
			if tt.wantErr && !strings.Contains(buf.String(), "sandbox-broker@0123456789abcdef0123456789abcdef.socket") {
				t.Errorf("the log line does not name the units:\n%s", buf.String())
			}
		})
	}
}

// Cleanup goes through StopUnits: a unit stop that timed out once no longer
// fails the cleanup (it did, with one 5 s attempt, under issue 25's burst).
func TestCleanupRetriesATimedOutUnitStop(t *testing.T) {
	u := &scriptedUnits{script: []error{errBlock, nil}}
	log := slog.New(slog.DiscardHandler)
	l := New(Options{Units: u, Logger: log, UnitStopTimeout: 20 * time.Millisecond,
		RemoveTimeout: 20 * time.Millisecond, RemoveRetryDelay: time.Millisecond})
	b := &Handle{ID: "0123456789abcdef0123456789abcdef", UnitTried: true}
	if err := l.Cleanup(b, log); err != nil {
		t.Errorf("Cleanup = %v, want nil after the retried stop", err)
	}
	if u.calls != 2 {
		t.Errorf("StopBroker called %d times, want 2", u.calls)
	}
}
