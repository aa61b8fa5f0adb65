package main

import "testing"

func TestStandbyTurns(t *testing.T) {
	text := `# HELP sandbox_standby_turns_total Turns by whether they found a ready standby.
# TYPE sandbox_standby_turns_total counter
sandbox_standby_turns_total{reason="",result="hit"} 7
sandbox_standby_turns_total{reason="none",result="miss"} 3
sandbox_standby_turns_total{reason="key",result="miss"} 2
sandbox_standby_discards_total{reason="expired"} 9
`
	for _, tc := range []struct {
		hit  bool
		want float64
	}{{true, 7}, {false, 5}} {
		if got := standbyTurns(text, tc.hit); got != tc.want {
			t.Errorf("standbyTurns(hit=%v) = %v, want %v", tc.hit, got, tc.want)
		}
	}
	if got := standbyTurns("", true); got != 0 {
		t.Errorf("empty text: got %v, want 0", got)
	}
}

func TestSetRuntime(t *testing.T) {
	base := "image: w\nruntimeX: keep\n"
	tests := []struct{ name, in, rt, want string }{
		{"runsc added", base, "runsc", base + "runtime: runsc\n"},
		{"runc is the default: key removed", base + "runtime: runsc\n", "runc", base},
		{"replaced, not duplicated", "runtime: runc-x\n" + base, "runsc", base + "runtime: runsc\n"},
		{"nested key untouched", "a:\n  runtime: y\n", "runc", "a:\n  runtime: y\n"},
	}
	for _, tt := range tests {
		if got := setRuntime(tt.in, tt.rt); got != tt.want {
			t.Errorf("%s: setRuntime = %q, want %q", tt.name, got, tt.want)
		}
	}
}
