package turns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type fakeRunner struct {
	name  string
	calls []int
	fail  map[int]bool
	log   *[]string
}

func (f *fakeRunner) Name() string { return f.name }
func (f *fakeRunner) Run(_ context.Context, seq int) (time.Duration, error) {
	f.calls = append(f.calls, seq)
	*f.log = append(*f.log, f.name)
	if f.fail[len(f.calls)] {
		return time.Millisecond, errors.New("boom")
	}
	return time.Duration(len(f.calls)) * time.Millisecond, nil
}

func TestInterleaveOrderWarmupAndFailures(t *testing.T) {
	var log []string
	a := &fakeRunner{name: "A", log: &log}
	b := &fakeRunner{name: "B", log: &log, fail: map[int]bool{3: true}}
	got := Interleave(context.Background(), []Runner{a, b}, 1, 3, 0)
	if want := "A B A B A B A B"; strings.Join(log, " ") != want {
		t.Errorf("order = %v, want %s", log, want)
	}
	if n := len(got[0].WarmupMs); n != 1 {
		t.Errorf("A warm-up samples = %d, want 1", n)
	}
	if got[0].Summary.N != 3 || got[0].Summary.Median != 3 {
		t.Errorf("A summary = %+v, want n=3 median=3 (warm-up sample 1 excluded)", got[0].Summary)
	}
	if got[1].Failures != 1 || got[1].Summary.N != 2 || len(got[1].Errors) != 1 {
		t.Errorf("B = failures %d n %d errors %v, want 1, 2, one error", got[1].Failures, got[1].Summary.N, got[1].Errors)
	}
}

func TestDockerArgsCarryEveryConfinementFlag(t *testing.T) {
	s := DockerSpec{Image: "img:latest", UID: 990, GID: 991, Workspace: "/w", TurnDir: "/t",
		Limits: Limits{MemoryMB: 512, CPUs: 1, Pids: 64, TmpfsMB: 64}, LogDriver: "journald", LogTag: "sandbox/bench", NamePrefix: "rs-bench"}
	args := strings.Join(DockerArgs(s, 1), " ")
	for _, want := range []string{
		"run --rm -i", "--network none", "--read-only", "--cap-drop ALL", "--security-opt no-new-privileges",
		"--user 990:991", "--memory 512m", "--memory-swap 512m", "--cpus 1", "--pids-limit 64",
		"--tmpfs /tmp:size=64m,mode=1777,nosuid,nodev,noexec", "--workdir /workspace",
		"type=bind,source=/w,target=/workspace,bind-propagation=rprivate",
		"type=bind,source=/t,target=/run/broker,readonly,bind-propagation=rprivate",
		"--env SANDBOX_BROKER_SOCKET=/run/broker/broker.sock", "--env SANDBOX_API_KEY=sandbox-dummy-key",
		"--pull never", "--log-driver journald --log-opt tag=sandbox/bench",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("docker args lack %q\n%s", want, args)
		}
	}
	if !strings.HasSuffix(args, " img:latest") {
		t.Errorf("image must be last: %s", args)
	}
	s.Drop = map[string]bool{GroupJournald: true, GroupLimits: true}
	v := strings.Join(DockerArgs(s, 2), " ")
	if !strings.Contains(v, "--log-driver none") || strings.Contains(v, "--memory") || !strings.Contains(v, "--cap-drop ALL") {
		t.Errorf("variant without journald and limits: %s", v)
	}
}

func TestCheckHostReply(t *testing.T) {
	tests := []struct {
		body string
		ok   bool
	}{
		{`{"ok":true,"text":"hi"}`, true},
		{`{"reply":{"ok":true,"text":"hi"}}`, true},
		{`{"reply":"hi"}`, true},
		{`{"ok":false,"text":"generic error"}`, false},
		{`{"error":"turn failed"}`, false},
		{`{"ok":true,"text":""}`, false},
		{`not json`, false},
	}
	for _, tt := range tests {
		err := checkHostReply([]byte(tt.body))
		if (err == nil) != tt.ok {
			t.Errorf("checkHostReply(%s) = %v, want ok=%v", tt.body, err, tt.ok)
		}
	}
}

type loadRunner struct{ fail bool }

func (l loadRunner) Name() string { return "load" }
func (l loadRunner) Run(_ context.Context, seq int) (time.Duration, error) {
	if l.fail && seq%4 == 0 {
		return 0, fmt.Errorf("x: status 429: queue full: %w", ErrReply)
	}
	return time.Millisecond, nil
}

func TestLoadCountsEveryTurnAndFailure(t *testing.T) {
	got := Load(context.Background(), 4, 4, func(ch int) Runner { return loadRunner{fail: ch == 1} })
	if n := len(got.LatenciesMs) + got.Failures; n != 16 {
		t.Errorf("turns accounted = %d, want 16", n)
	}
	if got.Failures != 1 || got.FailureKinds["http 429"] != 1 {
		t.Errorf("failures = %d kinds %v, want 1 of kind http 429", got.Failures, got.FailureKinds)
	}
}
