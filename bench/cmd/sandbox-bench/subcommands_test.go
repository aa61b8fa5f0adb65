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

func TestSetGlobalConcurrency(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"replaced in place", "queue:\n  depth: 8\n  globalConcurrency: 0\ntimeZone: UTC\n", "queue:\n  depth: 8\n  globalConcurrency: 4\ntimeZone: UTC\n"},
		{"added to the queue block", "queue:\n  depth: 8\ntimeZone: UTC\n", "queue:\n  depth: 8\n  globalConcurrency: 4\ntimeZone: UTC\n"},
		{"added to a last queue block", "a: 1\nqueue:\n  depth: 8\n", "a: 1\nqueue:\n  depth: 8\n  globalConcurrency: 4\n"},
		{"a block added", "a: 1\n", "a: 1\nqueue:\n  globalConcurrency: 4\n"},
		{"another block's key untouched", "x:\n  globalConcurrency: 9\nqueue:\n  depth: 8\n", "x:\n  globalConcurrency: 9\nqueue:\n  depth: 8\n  globalConcurrency: 4\n"},
	}
	for _, tt := range tests {
		if got := setQueueKey(tt.in, "globalConcurrency", 4); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
	if got, want := setQueueKey("queue:\n  globalConcurrency: 4\n  startConcurrency: 0\n", "startConcurrency", 2), "queue:\n  globalConcurrency: 4\n  startConcurrency: 2\n"; got != want {
		t.Errorf("setQueueKey startConcurrency = %q, want %q", got, want)
	}
	if got, want := queueBlock("queue:\n  depth: 8\n  globalConcurrency: 0   # none\nb: 1\n"), "depth: 8, globalConcurrency: 0   # none"; got != want {
		t.Errorf("queueBlock = %q, want %q", got, want)
	}
}

func TestBurstVariant(t *testing.T) {
	tests := []struct {
		spec         string
		fixed        bool
		name         string
		cap, starts  int
		tuning, fail bool
	}{
		{spec: "4", name: "globalConcurrency: 4", cap: 4},
		{spec: "16", fixed: true, name: "globalConcurrency: 16, startConcurrency: 16", cap: 16, starts: 16},
		{spec: "16:2", name: "globalConcurrency: 16, startConcurrency: 2", cap: 16, starts: 2, tuning: true},
		{spec: "16:2", fixed: true, name: "globalConcurrency: 16, startConcurrency: 2", cap: 16, starts: 2, tuning: true},
		{spec: "0", fail: true},
		{spec: "x", fail: true},
		{spec: "16:", fail: true},
		{spec: "16:-1", fail: true},
	}
	for _, tt := range tests {
		v, err := burstVariant(tt.spec, tt.fixed)
		if tt.fail {
			if err == nil {
				t.Errorf("%q: no error, want one", tt.spec)
			}
			continue
		}
		if err != nil || v.Name != tt.name || v.Cap != tt.cap || v.Starts != tt.starts || v.Tuning != tt.tuning {
			t.Errorf("%q (fixed %v) = %+v, %v; want %q cap %d starts %d tuning %v", tt.spec, tt.fixed, v, err, tt.name, tt.cap, tt.starts, tt.tuning)
		}
	}
}

func TestStandbyRunDeltas(t *testing.T) {
	before := "sandbox_run_standby_total{result=\"hit\"} 1\nsandbox_standby_turns_total{result=\"hit\"} 5\n"
	after := "# HELP x\nsandbox_run_standby_total{result=\"hit\"} 4\nsandbox_run_standby_total{result=\"miss\"} 1\nsandbox_standby_turns_total{result=\"hit\"} 9\n"
	got := standbyRunDeltas(before, after)
	want := map[string]float64{`sandbox_run_standby_total{result="hit"}`: 3, `sandbox_run_standby_total{result="miss"}`: 1}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
