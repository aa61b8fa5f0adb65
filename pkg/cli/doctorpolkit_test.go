package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestParsePolkitVersion(t *testing.T) {
	tests := []struct {
		in     string
		want   int
		wantOK bool
	}{
		{"pkaction version 122\n", 122, true},
		{"pkaction version 126", 126, true},
		{"pkaction version 0.105\n", 0, true},
		{"", 0, false},
		{"pkaction version x12", 0, false},
		{"pkaction version -1", 0, false},
	}
	for _, tt := range tests {
		got, ok := parsePolkitVersion(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parsePolkitVersion(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestDoctorPolkitVersion: polkit 122 is warned of with its remedy, 123 and
// later pass, and an unreadable version is a warning (never a failure: the
// rule's own check says whether polkit is there).
func TestDoctorPolkitVersion(t *testing.T) {
	tests := []struct {
		name       string
		out        string
		err        error
		wantStatus string
		wantText   string
		wantRemedy string
	}{
		{"debian 12", "pkaction version 122\n", nil, StatusWarn, "Terminating runaway script", "123 or later"},
		{"fixed", "pkaction version 123\n", nil, StatusOK, "polkit 123", ""},
		{"debian 13", "pkaction version 126\n", nil, StatusOK, "polkit 126", ""},
		{"no pkaction", "", errors.New("exec: not found"), StatusWarn, "could not read", "install polkitd"},
		{"garbage", "what\n", nil, StatusWarn, "could not read", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, d := fakeMachine(t)
			d.polkitVersion = func(context.Context) (string, error) { return tt.out, tt.err }
			rep := runDoctor(context.Background(), path, d)
			c, ok := statusOf(rep, "polkit-version")
			if !ok || c.Status != tt.wantStatus || !strings.Contains(c.Detail, tt.wantText) {
				t.Fatalf("polkit-version = %+v (found %v), want %s containing %q", c, ok, tt.wantStatus, tt.wantText)
			}
			if !strings.Contains(c.Remedy, tt.wantRemedy) {
				t.Errorf("remedy = %q, want it to contain %q", c.Remedy, tt.wantRemedy)
			}
			if !rep.OK {
				t.Errorf("a polkit version made the report fail: %+v", rep.Checks)
			}
		})
	}
}
