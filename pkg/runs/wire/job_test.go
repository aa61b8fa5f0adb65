package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func validJob() Job {
	return Job{
		Setup: []string{"apt-get install -y jq"}, Command: "echo hi", UID: 1000, GID: 1000,
		Artifacts: []string{"report.json", "cov/index.html"}, MaxOutputBytes: 1 << 20,
		MaxArtifactBytes: 8 << 20, MaxArtifactTotalBytes: 32 << 20,
	}
}

func TestJobValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Job)
		want string // "" accepts; else a substring of the error
	}{
		{"shell mode", func(j *Job) {}, ""},
		{"argv mode", func(j *Job) { j.Command, j.Argv = "", []string{"python3", "-c", "print(1)"} }, ""},
		{"no setup, no artifacts", func(j *Job) { j.Setup, j.Artifacts = nil, nil }, ""},
		{"both modes", func(j *Job) { j.Argv = []string{"ls"} }, "both command and argv"},
		{"neither mode", func(j *Job) { j.Command = "" }, "neither command nor argv"},
		{"empty argv[0]", func(j *Job) { j.Command, j.Argv = "", []string{"", "x"} }, "argv[0] is empty"},
		{"NUL in argv", func(j *Job) { j.Command, j.Argv = "", []string{"ls", "a\x00b"} }, "argv[1] contains a NUL"},
		{"NUL in command", func(j *Job) { j.Command = "echo \x00" }, "command contains a NUL"},
		{"invalid UTF-8 in command", func(j *Job) { j.Command = "echo \xff" }, "not valid UTF-8"},
		{"empty setup entry", func(j *Job) { j.Setup = []string{"true", ""} }, "setup[1] is empty"},
		{"NUL in setup", func(j *Job) { j.Setup = []string{"a\x00"} }, "setup[0] contains a NUL"},
		{"uid 0", func(j *Job) { j.UID = 0 }, "uid and gid must be > 0"},
		{"gid 0", func(j *Job) { j.GID = 0 }, "uid and gid must be > 0"},
		{"negative uid", func(j *Job) { j.UID = -1 }, "uid and gid must be > 0"},
		{"output bound 0", func(j *Job) { j.MaxOutputBytes = 0 }, "must be > 0"},
		{"artifact bound 0", func(j *Job) { j.MaxArtifactBytes = 0 }, "must be > 0"},
		{"artifact total negative", func(j *Job) { j.MaxArtifactTotalBytes = -1 }, "must be > 0"},
		{"absolute artifact", func(j *Job) { j.Artifacts = []string{"/etc/passwd"} }, "absolute path"},
		{"dotdot artifact", func(j *Job) { j.Artifacts = []string{"../x"} }, ". or .. component"},
		{"inner dotdot artifact", func(j *Job) { j.Artifacts = []string{"a/../../x"} }, "not clean"},
		{"bare dotdot artifact", func(j *Job) { j.Artifacts = []string{".."} }, ". or .. component"},
		{"dot artifact", func(j *Job) { j.Artifacts = []string{"."} }, ". or .. component"},
		{"unclean artifact", func(j *Job) { j.Artifacts = []string{"a//b"} }, "not clean"},
		{"trailing slash artifact", func(j *Job) { j.Artifacts = []string{"a/"} }, "not clean"},
		{"empty artifact", func(j *Job) { j.Artifacts = []string{""} }, "empty path"},
		{"NUL artifact", func(j *Job) { j.Artifacts = []string{"a\x00b"} }, "NUL"},
		{"long artifact", func(j *Job) { j.Artifacts = []string{strings.Repeat("a/", 2049)[:4097]} }, "longer than 4096"},
		{"long component", func(j *Job) { j.Artifacts = []string{strings.Repeat("a", 256)} }, "component longer than 255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := validJob()
			tt.edit(&j)
			err := j.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidJob containing %q", err, tt.want)
			}
		})
	}
}

func TestJobRoundTrip(t *testing.T) {
	j := validJob()
	j.Proxy = true
	var buf bytes.Buffer
	if err := WriteJob(&buf, j); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("after")
	got, err := ReadJob(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Command != j.Command || got.UID != j.UID || !got.Proxy || len(got.Artifacts) != 2 || got.Setup[0] != j.Setup[0] ||
		got.MaxArtifactTotalBytes != j.MaxArtifactTotalBytes {
		t.Fatalf("got %+v, want %+v", got, j)
	}
	// Nothing after the newline was consumed (unbuffered reader path).
	if rest, _ := io.ReadAll(&buf); string(rest) != "after" {
		t.Fatalf("rest = %q, want %q", rest, "after")
	}
}

func TestWriteJobRefusesInvalidAndOversized(t *testing.T) {
	j := validJob()
	j.UID = 0
	if err := WriteJob(io.Discard, j); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("invalid job: err = %v, want ErrInvalidJob", err)
	}
	j = validJob()
	j.Command = strings.Repeat("x", MaxJobBytes)
	if err := WriteJob(io.Discard, j); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("oversized job: err = %v, want a size refusal", err)
	}
}

func TestReadJobRefusals(t *testing.T) {
	valid := `{"command":"true","uid":1,"gid":1,"maxOutputBytes":1,"maxArtifactBytes":1,"maxArtifactTotalBytes":1}`
	tests := []struct {
		name, in, want string
	}{
		{"valid at EOF", valid, ""},
		{"valid with newline", valid + "\n", ""},
		{"empty", "", "no job"},
		{"unknown field", strings.Replace(valid, `"uid"`, `"user":"root","uid"`, 1), "unknown field"},
		{"two values", valid + valid, "trailing data"},
		{"trailing garbage", valid + " x\n", "trailing data"},
		{"not JSON", "hello\n", "not a job JSON"},
		{"array", "[]\n", "not a job JSON"},
		{"invalid job", strings.Replace(valid, `"uid":1`, `"uid":0`, 1), "uid and gid"},
		{"over the bound", `{"command":"` + strings.Repeat("x", MaxJobBytes) + `"}`, "over 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tt.in), bufio.NewReader(strings.NewReader(tt.in))} {
				_, err := ReadJob(r)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("ReadJob = %v, want nil", err)
					}
					continue
				}
				if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("ReadJob = %v, want ErrInvalidJob containing %q", err, tt.want)
				}
			}
		})
	}
}

// A job exactly at MaxJobBytes (newline included) is read; one byte more is not.
func TestReadJobAtTheBound(t *testing.T) {
	base := `{"command":"","uid":1,"gid":1,"maxOutputBytes":1,"maxArtifactBytes":1,"maxArtifactTotalBytes":1}`
	pad := MaxJobBytes - len(base) - 1
	at := strings.Replace(base, `"command":""`, `"command":"`+strings.Repeat("x", pad)+`"`, 1) + "\n"
	if len(at) != MaxJobBytes {
		t.Fatalf("test setup: %d bytes", len(at))
	}
	if _, err := ReadJob(strings.NewReader(at)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	over := strings.Replace(at, `"command":"`, `"command":"x`, 1)
	if _, err := ReadJob(strings.NewReader(over)); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("one over the bound: err = %v, want ErrInvalidJob", err)
	}
}
