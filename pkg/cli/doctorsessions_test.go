package cli

import (
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

func TestDoctorSessions(t *testing.T) {
	base := config.Sessions{Enabled: true, MaxLive: 8, MaxPerClient: 2, MaxMemoryMB: 8192, MemoryMB: 2048, IdleSeconds: 300, TTLSeconds: 3600}
	for _, tc := range []struct {
		name   string
		change func(*config.Sessions)
		memory int64
		status string
		want   string
	}{
		{"fits", nil, 32768, StatusOK, "8192 MiB of memory limits"},
		{"bounded by maxLive", func(s *config.Sessions) { s.MaxLive = 2 }, 32768, StatusOK, "4096 MiB"},
		{"over half the machine", nil, 8192, StatusWarn, "lower sessions.maxMemoryMb to 4096"},
		{"off", func(s *config.Sessions) { s.Enabled = false }, 8192, StatusOK, "sessions.enabled: false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{Sessions: base}
			if tc.change != nil {
				tc.change(&cfg.Sessions)
			}
			var got []Check
			machine := func() config.Machine { return config.Machine{CPUs: 2, MemoryMB: tc.memory, MemoryRead: true} }
			doctorSessions(cfg, doctorDeps{machine: machine}, func(name, status, detail, remedy string) {
				got = append(got, Check{name, status, detail, remedy})
			})
			if len(got) != 1 || got[0].Status != tc.status || !strings.Contains(got[0].Detail+got[0].Remedy, tc.want) {
				t.Errorf("%+v, want %s naming %q", got, tc.status, tc.want)
			}
		})
	}
}
