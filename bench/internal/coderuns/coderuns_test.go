package coderuns

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// clock advances 10 ms per reading.
func clock(start time.Time) func() time.Time {
	n := 0
	return func() time.Time { n++; return start.Add(time.Duration(n) * 10 * time.Millisecond) }
}

func ndjson(t *testing.T, evs ...runs.Event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range evs {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestFollowEvents(t *testing.T) {
	zero, one := 0, 1
	out := func(stream, data string) runs.Event {
		return runs.Event{Type: runs.EventOutput, Stream: stream, Phase: "main", Data: []byte(data)}
	}
	result := func(res string, code *int, stdout string) runs.Event {
		return runs.Event{Type: runs.EventResult, Status: &runs.Status{ID: "r1", Result: res, ExitCode: code, Stdout: stdout, DurationMs: 42}}
	}
	state := runs.Event{Type: runs.EventState, State: runs.StateRunning}
	tests := []struct {
		name          string
		body          string
		first, result time.Duration // 0: not checked
		err           string
	}{
		{"marker in one event", ndjson(t, state, out("stdout", "ready\n"), result(runs.ResultOK, &zero, "ready\n")), 10 * time.Millisecond, 20 * time.Millisecond, ""},
		{"marker split over two events", ndjson(t, out("stdout", "rea"), out("stdout", "dy\n"), result(runs.ResultOK, &zero, "ready\n")), 10 * time.Millisecond, 20 * time.Millisecond, ""},
		{"stderr does not count", ndjson(t, out("stderr", "ready\n"), result(runs.ResultOK, &zero, "")), 0, 0, "no output event"},
		{"non-zero exit", ndjson(t, out("stdout", "ready\n"), result(runs.ResultFailed, &one, "ready\n")), 0, 0, `ended "failed", exit code 1`},
		{"error without exit code", ndjson(t, result(runs.ResultError, nil, "")), 0, 0, "exit code none"},
		{"no result event", ndjson(t, out("stdout", "ready\n")), 0, 0, "before the result event"},
		{"not JSON", "{\n", 0, 0, "not JSON"},
		{"result without status", ndjson(t, runs.Event{Type: runs.EventResult}), 0, 0, "without a status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			got, err := FollowEvents(strings.NewReader(tt.body), start, clock(start))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.First != tt.first || got.Result != tt.result || got.HostMs != 42 {
				t.Errorf("got %+v, want first %v result %v hostMs 42", got, tt.first, tt.result)
			}
		})
	}
}

// chunks is a reader that returns one chunk per Read, each 10 ms after the
// previous one on its clock.
type chunks struct {
	parts []string
	now   time.Time
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	c.now = c.now.Add(10 * time.Millisecond)
	n := copy(p, c.parts[0])
	c.parts = c.parts[1:]
	return n, nil
}

func TestFirstMarker(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name  string
		parts []string
		want  time.Duration
	}{
		{"first read", []string{"ready\n"}, 10 * time.Millisecond},
		{"completed by the third read", []string{"x", "re", "ady\n", "more\n"}, 30 * time.Millisecond},
		{"never", []string{"not it\n"}, 0},
		{"nothing", nil, 0},
	}
	for _, tt := range tests {
		c := &chunks{parts: tt.parts, now: start}
		got, _, err := FirstMarker(c, start, func() time.Time { return c.now })
		if err != nil || got != tt.want {
			t.Errorf("%s: FirstMarker = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

func TestDockerArgs(t *testing.T) {
	s := DockerSpec{Image: "tb:latest", UID: 2147065535, GID: 2147065535, Workspace: "/w/empty",
		Limits: Limits{MemoryMB: 2048, CPUs: 1, Pids: 256, TmpfsMB: 512, OutputMB: 256}, LogDriver: "journald", LogTag: "sandbox/b",
		Argv: []string{"echo", "ready"}}
	got := DockerArgs(s, 7)
	line := strings.Join(got, " ")
	for _, want := range []string{
		"run --rm --name ", "--network none", "--read-only", "--cap-drop ALL", "--security-opt no-new-privileges",
		"--user 2147065535:2147065535", "--init=false", "--ipc none", "--memory 2048m", "--memory-swap 2048m", "--cpus 1", "--pids-limit 256",
		"--ulimit nofile=1024:1024", "--ulimit nproc=256:256",
		"--tmpfs /tmp:size=512m,mode=1777,nosuid,nodev ", "--tmpfs /output:size=256m,mode=0755,nosuid,nodev,uid=2147065535,gid=2147065535",
		"--mount type=bind,source=/w/empty,target=/workspace,readonly,bind-propagation=rprivate",
		"--log-driver journald --log-opt tag=sandbox/b", "--pull never",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("docker args lack %q:\n%s", want, line)
		}
	}
	// The command replaces the entrypoint; the image and its argument end it.
	if tail := got[len(got)-4:]; strings.Join(tail, " ") != "--entrypoint echo tb:latest ready" {
		t.Errorf("args end %q, want --entrypoint echo tb:latest ready", tail)
	}
	for _, bad := range []string{"-i", "--privileged", "--cap-add"} {
		for _, a := range got {
			if a == bad {
				t.Errorf("docker args hold %q", bad)
			}
		}
	}
}
