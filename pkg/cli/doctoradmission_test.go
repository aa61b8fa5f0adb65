package cli

import (
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

func TestDoctorAdmission(t *testing.T) {
	twoCores := func() config.Machine { return config.Machine{CPUs: 2, MemoryMB: 24105} }
	tests := []struct {
		name       string
		configured int
		wantStatus string
		wantDetail []string
	}{
		{"derived", 0, StatusOK, []string{"global concurrency 16", "derived", "8 per CPU x 2 CPUs", "60 s", "429 busy"}},
		{"configured within what the machine bears", 4, StatusOK, []string{"global concurrency 4 (queue.globalConcurrency)"}},
		{"configured above it", 64, StatusWarn, []string{"global concurrency 64", "this machine bears 16"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &config.Config{Queue: config.Queue{Depth: 8, GlobalConcurrency: tt.configured, MaxWaitSeconds: 60},
				Limits: config.Limits{MemoryMB: 512}}
			var got []Check
			doctorAdmission(cfg, doctorDeps{machine: twoCores}, func(name, status, detail, remedy string) {
				got = append(got, Check{name, status, detail, remedy})
			})
			if len(got) != 1 || got[0].Name != "admission" || got[0].Status != tt.wantStatus {
				t.Fatalf("checks = %+v, want one admission check %s", got, tt.wantStatus)
			}
			for _, w := range tt.wantDetail {
				if !strings.Contains(got[0].Detail, w) {
					t.Errorf("detail %q lacks %q", got[0].Detail, w)
				}
			}
			if tt.wantStatus == StatusWarn && !strings.Contains(got[0].Remedy, "queue.globalConcurrency") {
				t.Errorf("remedy %q does not name the key", got[0].Remedy)
			}
		})
	}
}
