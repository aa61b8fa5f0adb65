package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// TestDoctorLeftovers: a container past its deadline plus
// reaper.graceSeconds (what a failed cleanup leaves, and what holds its
// channel) is a warning naming it and the reaper; one within its deadline,
// or without a deadline label, is not.
func TestDoctorLeftovers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	cfg := &config.Config{Installation: "default"}
	cfg.Reaper.GraceSeconds = 60
	deadline := func(d time.Duration) map[string]string {
		return map[string]string{layout.LabelDeadline: strconv.FormatInt(now.Add(d).Unix(), 10), layout.LabelTurn: "t-" + d.String()}
	}
	tests := []struct {
		name       string
		containers []container.Info
		status     string
		want       string
	}{
		{"none", nil, StatusOK, "no container past its deadline (of 0)"},
		{"running turn", []container.Info{{Name: "a", Labels: deadline(time.Minute), State: "running"}}, StatusOK, "of 1"},
		{"within the grace", []container.Info{{Name: "a", Labels: deadline(-30 * time.Second), State: "running"}}, StatusOK, "of 1"},
		{"no deadline label", []container.Info{{Name: "a", Labels: map[string]string{}}}, StatusOK, "of 1"},
		{"left by a failed cleanup", []container.Info{{Name: "roundtable-sandbox-x", Labels: deadline(-2 * time.Minute), State: "exited"}}, StatusWarn, "1 container(s) past their deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Check
			doctorLeftovers(context.Background(), cfg, fakeProbe{containers: tt.containers}, now, func(name, status, detail, remedy string) {
				got = append(got, Check{Name: name, Status: status, Detail: detail, Remedy: remedy})
			})
			if len(got) != 1 || got[0].Name != "leftovers" || got[0].Status != tt.status || !strings.Contains(got[0].Detail, tt.want) {
				t.Fatalf("checks = %+v, want one leftovers %s containing %q", got, tt.status, tt.want)
			}
			if tt.status == StatusWarn && (!strings.Contains(got[0].Detail, "roundtable-sandbox-x") || !strings.Contains(got[0].Remedy, "sandbox-reaper")) {
				t.Errorf("warning %+v does not name the container and the reaper", got[0])
			}
		})
	}
}
