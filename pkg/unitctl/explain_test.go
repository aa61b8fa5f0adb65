package unitctl

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

var cred = "sandbox-credset@" + turn + ".service"

// A failed job says which unit failed and which limit, read from the
// units' Result properties.
func TestFailedJobNamesUnitAndLimit(t *testing.T) {
	tests := []struct {
		name        string
		job         string                    // the broker service's job result
		props       map[string]map[string]any // what systemd answers
		wantFailed  string
		wantSummary string
		wantInError []string
	}{
		{"the broker's own start timed out", "failed",
			map[string]map[string]any{svc: {"Result": "timeout", "TimeoutStartUSec": uint64(10 * time.Second / time.Microsecond)}},
			svc, "broker unit failed to start (timeout, TimeoutStartSec=10s)",
			[]string{svc, `job result "failed"`, `unit result "timeout"`, "TimeoutStartSec=10s"}},
		{"the credential copy timed out: dependency", "dependency",
			map[string]map[string]any{
				cred: {"Result": "timeout", "TimeoutStartUSec": uint64(time.Minute / time.Microsecond)},
				svc:  {"Result": "success"}, sock: {"Result": "success"},
			},
			cred, "credential unit failed to start (timeout, TimeoutStartSec=1min)",
			[]string{svc, `job result "dependency"`, cred, `unit result "timeout"`, "TimeoutStartSec=1min"}},
		{"a second start of the broker", "failed",
			map[string]map[string]any{svc: {"Result": "start-limit-hit"}},
			svc, "broker unit failed to start (start-limit-hit, StartLimitBurst: one start a turn)",
			[]string{svc, "start-limit-hit"}},
		{"the credential copy exited non-zero", "dependency",
			map[string]map[string]any{cred: {"Result": "exit-code"}},
			cred, "credential unit failed to start (exit-code, its process exit code)",
			[]string{cred, "exit-code"}},
		{"units gone before they could be read: the job result still says it", "failed",
			nil, svc, "broker unit failed to start (failed)", []string{svc, `job result "failed"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.results[svc] = tt.job
			f.props = tt.props
			m := managerWith(t, f)
			err := m.StartBrokerService(context.Background(), turn)
			if !errors.Is(err, ErrJob) {
				t.Fatalf("err = %v, want ErrJob", err)
			}
			ue, ok := AsUnitError(err)
			if !ok {
				t.Fatalf("err %v is no *UnitError", err)
			}
			if ue.Failed != tt.wantFailed || ue.Summary() != tt.wantSummary {
				t.Errorf("failed %q, summary %q; want %q, %q", ue.Failed, ue.Summary(), tt.wantFailed, tt.wantSummary)
			}
			for _, w := range tt.wantInError {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(ue.Summary(), turn) {
				t.Errorf("summary %q names the turn: it is the API's answer", ue.Summary())
			}
		})
	}
}

func TestExplainBroker(t *testing.T) {
	tests := []struct {
		name        string
		props       map[string]map[string]any
		wantSummary string // "" = nil
	}{
		{"all well", map[string]map[string]any{cred: {"Result": "success"}, svc: {"Result": "success"}, sock: {"Result": "success"}}, ""},
		{"not loaded", nil, ""},
		{"socket-activated broker timed out starting", map[string]map[string]any{
			cred: {"Result": "success"}, sock: {"Result": "success"},
			svc: {"Result": "timeout", "TimeoutStartUSec": uint64(10 * time.Second / time.Microsecond)},
		}, "broker unit failed to start (timeout, TimeoutStartSec=10s)"},
		{"the credential unit is named first", map[string]map[string]any{
			cred: {"Result": "timeout", "TimeoutStartUSec": uint64(10 * time.Second / time.Microsecond)},
			svc:  {"Result": "resources"},
		}, "credential unit failed to start (timeout, TimeoutStartSec=10s)"},
		{"the broker ran out of memory", map[string]map[string]any{svc: {"Result": "oom-kill"}}, "broker unit failed to start (oom-kill, MemoryMax)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.props = tt.props
			m := managerWith(t, f)
			err := m.ExplainBroker(context.Background(), turn)
			if tt.wantSummary == "" {
				if err != nil {
					t.Errorf("ExplainBroker = %v, want nil", err)
				}
				return
			}
			ue, ok := AsUnitError(err)
			if !ok || ue.Summary() != tt.wantSummary {
				t.Errorf("ExplainBroker = %v, want summary %q", err, tt.wantSummary)
			}
			if len(f.calls) != 0 {
				t.Errorf("ExplainBroker ran jobs: %v; it only reads", f.calls)
			}
		})
	}
}

func TestSystemdSpan(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{10 * time.Second, "10s"}, {time.Minute, "1min"}, {90 * time.Second, "1min 30s"}, {1500 * time.Millisecond, "1500ms"}, {0, "0"}} {
		if got := systemdSpan(tt.d); got != tt.want {
			t.Errorf("systemdSpan(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
