package runs

import (
	"errors"
	"path"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

var testLimits = ParamLimits{
	MaxArtifacts:        16,
	ProjectKnown:        func(name string) bool { return name == "demo" },
	CredentialAvailable: func(name string) bool { return name == "git" || name == "api" },
}

func manyStrings(n int, f func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		p       Params
		wantErr string // substring of the refusal; "" = accepted
		want    Params // the normalised params when accepted
	}{
		{name: "shell default timeout", p: Params{Command: "pytest -q"},
			want: Params{Command: "pytest -q", TimeoutSeconds: 120}},
		{name: "argv with args", p: Params{Executable: "python3", Args: []string{"/workspace/check.py", ""}, TimeoutSeconds: 5},
			want: Params{Executable: "python3", Args: []string{"/workspace/check.py", ""}, TimeoutSeconds: 5}},
		{name: "argv without args", p: Params{Executable: "true"},
			want: Params{Executable: "true", TimeoutSeconds: 120}},
		{name: "credentials", p: Params{Command: "git clone https://git.example.com/r", Network: true, Credentials: []string{"git", "api"}},
			want: Params{Command: "git clone https://git.example.com/r", Network: true, Credentials: []string{"git", "api"}, TimeoutSeconds: 120}},
		{name: "credentials without network", p: Params{Command: "x", Credentials: []string{"git"}}, wantErr: "credentials need network: true"},
		{name: "credential not available", p: Params{Command: "x", Network: true, Credentials: []string{"git", "other"}},
			wantErr: "credentials[1]: no credential of that name is available to this run"},
		{name: "credential twice", p: Params{Command: "x", Network: true, Credentials: []string{"git", "git"}},
			wantErr: "credentials[1] names the same credential as credentials[0]"},
		{name: "credential empty", p: Params{Command: "x", Network: true, Credentials: []string{""}}, wantErr: "credentials[0] must be 1 to 64 bytes"},
		{name: "credential NUL", p: Params{Command: "x", Network: true, Credentials: []string{"g\x00"}}, wantErr: "credentials[0] must not contain NUL"},
		{name: "too many credentials", p: Params{Command: "x", Network: true, Credentials: manyStrings(17, func(i int) string { return "git" })},
			wantErr: "credentials must have at most 16 entries"},
		{name: "everything", p: Params{Project: "demo", Command: "make", Setup: []string{"apt-get install -y jq"}, Network: true,
			TimeoutSeconds: 3600, Artifacts: []string{"./report.json", "coverage//index.html", "workspace/x"}},
			want: Params{Project: "demo", Command: "make", Setup: []string{"apt-get install -y jq"}, Network: true,
				TimeoutSeconds: 3600, Artifacts: []string{"report.json", "coverage/index.html", "workspace/x"}}},
		{name: "timeout 1", p: Params{Command: "x", TimeoutSeconds: 1}, want: Params{Command: "x", TimeoutSeconds: 1}},

		// Mode: both or neither.
		{name: "both modes", p: Params{Command: "ls", Executable: "ls"}, wantErr: "not both"},
		{name: "neither mode", p: Params{}, wantErr: "give either command"},
		{name: "args only", p: Params{Args: []string{"x"}}, wantErr: "give either command"},
		{name: "args with command", p: Params{Command: "ls", Args: []string{"-l"}}, wantErr: "args is only for argv mode"},
		{name: "blank command", p: Params{Command: "  \n"}, wantErr: "command must not be empty"},
		{name: "blank executable", p: Params{Executable: " "}, wantErr: "executable must not be empty"},
		{name: "blank command with executable", p: Params{Command: " ", Executable: "ls"}, wantErr: "not both"},
		{name: "command with blank executable", p: Params{Command: "ls", Executable: " "}, wantErr: "not both"},

		// Sizes and text.
		{name: "command too long", p: Params{Command: strings.Repeat("x", MaxCommandBytes+1)}, wantErr: "command must be at most 65536 bytes"},
		{name: "command at bound", p: Params{Command: strings.Repeat("x", MaxCommandBytes)},
			want: Params{Command: strings.Repeat("x", MaxCommandBytes), TimeoutSeconds: 120}},
		{name: "command NUL", p: Params{Command: "ls\x00rm"}, wantErr: "command must not contain NUL"},
		{name: "command bad UTF-8", p: Params{Command: "ls \xff"}, wantErr: "command must be valid UTF-8"},
		{name: "executable NUL", p: Params{Executable: "ls\x00"}, wantErr: "executable must not contain NUL"},
		{name: "executable too long", p: Params{Executable: strings.Repeat("x", MaxExecutableBytes+1)}, wantErr: "executable must be at most"},
		{name: "too many args", p: Params{Executable: "echo", Args: manyStrings(MaxArgs+1, func(int) string { return "a" })}, wantErr: "args must have at most 1024 entries"},
		{name: "args too big", p: Params{Executable: "echo", Args: manyStrings(5, func(int) string { return strings.Repeat("a", 64<<10) })}, wantErr: "args must be at most 262144 bytes"},
		{name: "arg NUL", p: Params{Executable: "echo", Args: []string{"a", "b\x00"}}, wantErr: "args[1] must not contain NUL"},
		{name: "arg bad UTF-8", p: Params{Executable: "echo", Args: []string{"\xc3"}}, wantErr: "args[0] must be valid UTF-8"},

		// Setup.
		{name: "33 setup", p: Params{Command: "x", Setup: manyStrings(MaxSetupCommands+1, func(int) string { return "true" })}, wantErr: "setup must have at most 32"},
		{name: "32 setup", p: Params{Command: "x", Setup: manyStrings(MaxSetupCommands, func(int) string { return "true" })},
			want: Params{Command: "x", Setup: manyStrings(MaxSetupCommands, func(int) string { return "true" }), TimeoutSeconds: 120}},
		{name: "empty setup", p: Params{Command: "x", Setup: []string{"true", ""}}, wantErr: "setup[1] must not be empty"},
		{name: "setup NUL", p: Params{Command: "x", Setup: []string{"a\x00"}}, wantErr: "setup[0] must not contain NUL"},
		{name: "setup too long", p: Params{Command: "x", Setup: []string{strings.Repeat("y", MaxCommandBytes+1)}}, wantErr: "setup[0] must be at most"},

		// Timeout.
		{name: "timeout negative", p: Params{Command: "x", TimeoutSeconds: -1}, wantErr: "timeoutSeconds must be 1 to 3600"},
		{name: "timeout over", p: Params{Command: "x", TimeoutSeconds: 3601}, wantErr: "timeoutSeconds must be 1 to 3600"},

		// Project.
		{name: "unknown project", p: Params{Command: "x", Project: "other"}, wantErr: "project is not a project declared"},
		{name: "project path", p: Params{Command: "x", Project: "/etc"}, wantErr: "project is not a project declared"},
		{name: "project NUL", p: Params{Command: "x", Project: "demo\x00"}, wantErr: "project must not contain NUL"},
		{name: "project bad UTF-8", p: Params{Command: "x", Project: "\xfe"}, wantErr: "project must be valid UTF-8"},

		// Hostile artifacts.
		{name: "artifact ../x", p: Params{Command: "x", Artifacts: []string{"../x"}}, wantErr: "artifacts[0]: artifact path must not contain .."},
		{name: "artifact /etc/passwd", p: Params{Command: "x", Artifacts: []string{"ok", "/etc/passwd"}}, wantErr: "artifacts[1]: artifact path must be relative to /output"},
		{name: "artifact /output/x", p: Params{Command: "x", Artifacts: []string{"/output/x"}}, wantErr: "relative to /output"},
		{name: "artifact /workspace/x", p: Params{Command: "x", Artifacts: []string{"/workspace/x"}}, wantErr: "relative to /output"},
		{name: "artifact /tmp/x", p: Params{Command: "x", Artifacts: []string{"/tmp/x"}}, wantErr: "relative to /output"},
		{name: "artifact ../workspace/x", p: Params{Command: "x", Artifacts: []string{"../workspace/x"}}, wantErr: "must not contain .."},
		{name: "artifact a/../../b", p: Params{Command: "x", Artifacts: []string{"a/../../b"}}, wantErr: "must not contain .."},
		{name: "artifact ./", p: Params{Command: "x", Artifacts: []string{"./"}}, wantErr: "not /output itself"},
		{name: "artifact x/", p: Params{Command: "x", Artifacts: []string{"x/"}}, wantErr: "not a directory"},
		{name: "artifact backslash", p: Params{Command: "x", Artifacts: []string{`a\b`}}, wantErr: "backslashes"},
		{name: "artifact NUL", p: Params{Command: "x", Artifacts: []string{"a\x00b"}}, wantErr: "NUL"},
		{name: "artifact 300-byte component", p: Params{Command: "x", Artifacts: []string{"d/" + strings.Repeat("a", 300)}}, wantErr: "components must be at most 255 bytes"},
		{name: "10000 artifacts", p: Params{Command: "x", Artifacts: manyStrings(10000, func(i int) string { return "f" + strings.Repeat("x", i%7) })}, wantErr: "artifacts must have at most 16 entries, got 10000"},
		{name: "17 artifacts", p: Params{Command: "x", Artifacts: manyStrings(17, func(i int) string { return string(rune('a' + i)) })}, wantErr: "at most 16 entries"},
		{name: "16 artifacts", p: Params{Command: "x", Artifacts: manyStrings(16, func(i int) string { return string(rune('a' + i)) })},
			want: Params{Command: "x", TimeoutSeconds: 120, Artifacts: manyStrings(16, func(i int) string { return string(rune('a' + i)) })}},
		{name: "duplicate after cleaning", p: Params{Command: "x", Artifacts: []string{"a/b", "./a//b"}}, wantErr: "artifacts[1] names the same file as artifacts[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p.Clone()
			err := p.Validate(testLimits)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("Validate = nil, want refusal containing %q", tc.wantErr)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("Validate error %v does not wrap ErrInvalid", err)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Validate error = %q, want it to contain %q", err, tc.wantErr)
				}
				if !reflect.DeepEqual(p, tc.p) {
					t.Errorf("refused Params changed: got %+v, want %+v", p, tc.p)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			if !reflect.DeepEqual(p, tc.want) {
				t.Errorf("normalised Params = %+v, want %+v", p, tc.want)
			}
		})
	}
}

func TestValidateZeroLimitsFailClosed(t *testing.T) {
	tests := []struct {
		name string
		p    Params
	}{
		{"artifact with zero MaxArtifacts", Params{Command: "x", Artifacts: []string{"a"}}},
		{"project with nil ProjectKnown", Params{Command: "x", Project: "demo"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(ParamLimits{}); !errors.Is(err, ErrInvalid) {
				t.Errorf("Validate(zero limits) = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestRefusalMessageHasNoSentinelPrefix(t *testing.T) {
	p := Params{Command: "x", TimeoutSeconds: -5}
	err := p.Validate(testLimits)
	if got, want := err.Error(), "timeoutSeconds must be 1 to 3600 (absent or 0 means 120), got -5"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

func TestMode(t *testing.T) {
	tests := []struct {
		p    Params
		want string
	}{
		{Params{Command: "ls"}, ModeShell},
		{Params{Executable: "ls"}, ModeArgv},
		{Params{}, ""},
	}
	for _, tc := range tests {
		if got := tc.p.Mode(); got != tc.want {
			t.Errorf("%+v.Mode() = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestCleanArtifactPath(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "report.json", want: "report.json"},
		{in: "./report.json", want: "report.json"},
		{in: "coverage/index.html", want: "coverage/index.html"},
		{in: "a//b/./c", want: "a/b/c"},
		{in: "workspace/x", want: "workspace/x"},
		{in: "tmp/x", want: "tmp/x"},
		{in: "..x", want: "..x"},
		{in: "x..", want: "x.."},
		{in: "résumé.pdf", want: "résumé.pdf"},
		{in: strings.Repeat("a", 255), want: strings.Repeat("a", 255)},

		{in: "", wantErr: "must not be empty"},
		{in: "/etc/passwd", wantErr: "relative to /output"},
		{in: "/output/x", wantErr: "relative to /output"},
		{in: "/workspace/x", wantErr: "relative to /output"},
		{in: "/tmp/x", wantErr: "relative to /output"},
		{in: "//x", wantErr: "relative to /output"},
		{in: "../x", wantErr: "must not contain .."},
		{in: "..", wantErr: "must not contain .."},
		{in: "a/../b", wantErr: "must not contain .."},
		{in: "a/../../b", wantErr: "must not contain .."},
		{in: "../workspace/x", wantErr: "must not contain .."},
		{in: "../tmp/x", wantErr: "must not contain .."},
		{in: "a/..", wantErr: "must not contain .."},
		{in: ".", wantErr: "not /output itself"},
		{in: "./", wantErr: "not /output itself"},
		{in: ".//.", wantErr: "not /output itself"},
		{in: "x/", wantErr: "not a directory"},
		{in: "x/.", wantErr: "not a directory"},
		{in: `a\b`, wantErr: "backslashes"},
		{in: `..\x`, wantErr: "backslashes"},
		{in: "a\x00b", wantErr: "NUL"},
		{in: "a\nb", wantErr: "control characters"},
		{in: "a\x7fb", wantErr: "control characters"},
		{in: "a\u0085b", wantErr: "control characters"},
		{in: "a\xffb", wantErr: "valid UTF-8"},
		{in: strings.Repeat("a", 256), wantErr: "at most 255 bytes"},
		{in: "d/" + strings.Repeat("a", 300), wantErr: "at most 255 bytes"},
		{in: strings.Repeat("abcdefgh/", 114), wantErr: "at most 1024 bytes"},
	}
	for _, tc := range tests {
		got, err := CleanArtifactPath(tc.in)
		if tc.wantErr != "" {
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("CleanArtifactPath(%q) = %q, %v; want ErrInvalid containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("CleanArtifactPath(%q) = %q, %v; want %q, nil", tc.in, got, err, tc.want)
		}
	}
}

// checkCleanArtifact asserts what an accepted artifact path guarantees.
func checkCleanArtifact(t *testing.T, in, got string) {
	t.Helper()
	switch {
	case got == "" || got == "." || strings.HasPrefix(got, "/") || strings.HasPrefix(got, "./"):
		t.Fatalf("CleanArtifactPath(%q) = %q: not a relative file name", in, got)
	case path.Clean(got) != got:
		t.Fatalf("CleanArtifactPath(%q) = %q: not clean", in, got)
	case !strings.HasPrefix(path.Join("/output", got), "/output/"):
		t.Fatalf("CleanArtifactPath(%q) = %q: escapes /output", in, got)
	case !utf8.ValidString(got) || strings.ContainsAny(got, "\\\x00") || strings.IndexFunc(got, unicode.IsControl) >= 0:
		t.Fatalf("CleanArtifactPath(%q) = %q: bad characters", in, got)
	case len(got) > MaxArtifactPathBytes:
		t.Fatalf("CleanArtifactPath(%q) = %q: too long", in, got)
	}
	for _, c := range strings.Split(got, "/") {
		if c == ".." || c == "." || c == "" || len(c) > MaxArtifactComponentBytes {
			t.Fatalf("CleanArtifactPath(%q) = %q: bad component %q", in, got, c)
		}
	}
	if again, err := CleanArtifactPath(got); err != nil || again != got {
		t.Fatalf("CleanArtifactPath(%q) = %q, %v: not idempotent", got, again, err)
	}
}

func FuzzCleanArtifactPath(f *testing.F) {
	for _, s := range []string{"report.json", "./a//b", "../x", "/etc/passwd", "a/../../b", "./", "x/", `a\b`, "a\x00b", ".", "..", "a/./b/.", "\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := CleanArtifactPath(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("CleanArtifactPath(%q) error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		checkCleanArtifact(t, s, got)
	})
}

func FuzzValidate(f *testing.F) {
	f.Add("pytest -q", "", "", "", 0, "report.json\n./a//b", "", false)
	f.Add("", "python3", "/workspace/check.py\n-v", "apt-get install -y jq", 3600, "../x", "demo", true)
	f.Add("ls", "ls", "", "", -1, "/etc/passwd", "other", false)
	f.Add("", "", "x", "", 3601, "a\\b\nx/", "", false)
	f.Fuzz(func(t *testing.T, command, executable, args, setup string, timeout int, artifacts, project string, network bool) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, "\n")
		}
		p := Params{Project: project, Command: command, Executable: executable, Args: split(args), Setup: split(setup),
			Network: network, TimeoutSeconds: timeout, Artifacts: split(artifacts)}
		orig := p.Clone()
		err := p.Validate(testLimits)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate error %v does not wrap ErrInvalid", err)
			}
			if !reflect.DeepEqual(p, orig) {
				t.Fatalf("refused Params changed: %+v -> %+v", orig, p)
			}
			return
		}
		if (p.Command == "") == (p.Executable == "") || p.Mode() == "" {
			t.Fatalf("accepted %+v without exactly one mode", p)
		}
		if p.Command != "" && len(p.Args) > 0 {
			t.Fatalf("accepted args with command: %+v", p)
		}
		if p.TimeoutSeconds < 1 || p.TimeoutSeconds > MaxTimeoutSeconds {
			t.Fatalf("accepted timeout %d", p.TimeoutSeconds)
		}
		if timeout == 0 && p.TimeoutSeconds != DefaultTimeoutSeconds {
			t.Fatalf("timeout 0 became %d", p.TimeoutSeconds)
		}
		if p.Project != "" && p.Project != "demo" {
			t.Fatalf("accepted unknown project %q", p.Project)
		}
		if len(p.Setup) > MaxSetupCommands || len(p.Args) > MaxArgs || len(p.Artifacts) > testLimits.MaxArtifacts {
			t.Fatalf("accepted over a count bound: %+v", p)
		}
		for _, s := range append(append([]string{p.Command, p.Executable, p.Project}, p.Args...), p.Setup...) {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("accepted NUL or invalid UTF-8: %q", s)
			}
		}
		seen := map[string]bool{}
		for i, a := range p.Artifacts {
			checkCleanArtifact(t, orig.Artifacts[i], a)
			if seen[a] {
				t.Fatalf("accepted duplicate artifact %q", a)
			}
			seen[a] = true
		}
		again := p.Clone()
		if err := again.Validate(testLimits); err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("Validate not idempotent: %v, %+v -> %+v", err, p, again)
		}
	})
}
