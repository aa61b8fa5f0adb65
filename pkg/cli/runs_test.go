package cli

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

func TestRunExit(t *testing.T) {
	seven, zero := 7, 0
	cases := []struct {
		st   runs.Status
		want int
	}{
		{runs.Status{Result: runs.ResultOK, ExitCode: &zero}, 0},
		{runs.Status{Result: runs.ResultFailed, ExitCode: &seven}, 7},
		{runs.Status{Result: runs.ResultFailed, ExitCode: &seven, FailedSetup: 2}, 7},
		{runs.Status{Result: runs.ResultTimeout}, exitRunTimeout},
		{runs.Status{Result: runs.ResultDenied}, exitRunOther},
		{runs.Status{Result: runs.ResultCancelled}, exitRunOther},
		{runs.Status{Result: runs.ResultError, Error: "x"}, exitRunOther},
	}
	for _, c := range cases {
		err := runExit(c.st)
		got := 0
		var ee *exitError
		if errors.As(err, &ee) {
			got = ee.code
		} else if err != nil {
			got = -1
		}
		if got != c.want {
			t.Errorf("%s: exit %d, want %d (%v)", c.st.Result, got, c.want, err)
		}
	}
}

// TestWriteArtifacts: the CLI writes only clean relative paths under its
// directory, never through a symlink and never over an existing file, even
// when the host's answer is hostile.
func TestWriteArtifacts(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	written, err := writeArtifacts(dir, []runs.Artifact{{Path: "a/b.txt", Size: 2, Data: []byte("hi")}, {Path: "gone.txt", Error: "missing"}})
	if err != nil || len(written) != 1 {
		t.Fatalf("written %v err %v", written, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "a", "b.txt")); string(data) != "hi" {
		t.Errorf("content %q", data)
	}
	for _, bad := range []string{"../escape.txt", "/etc/x", "a/../../x", "./a"} {
		if _, err := writeArtifacts(dir, []runs.Artifact{{Path: bad, Data: []byte("x")}}); err == nil {
			t.Errorf("%q was written", bad)
		}
	}
	if _, err := writeArtifacts(dir, []runs.Artifact{{Path: "a/b.txt", Data: []byte("again")}}); err == nil {
		t.Errorf("an existing file was overwritten")
	}
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := writeArtifacts(dir, []runs.Artifact{{Path: "link", Data: []byte("x")}}); err == nil {
		t.Errorf("written through a symlink")
	}
	if _, err := os.Stat(filepath.Join(outside, "target")); err == nil {
		t.Errorf("the symlink's target was created")
	}
}

// TestWriteArtifactsNeverThroughALinkedDirectory: a symlinked directory
// planted at any component inside --out DIR is refused, never followed, so
// nothing lands outside DIR.
func TestWriteArtifactsNeverThroughALinkedDirectory(t *testing.T) {
	for _, tt := range []struct {
		name, link, path string
	}{
		{"first component", "a", "a/b.txt"},
		{"inner component", "x/y", "x/y/z.txt"},
		{"to be created below", "p", "p/q/r.txt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, outside := t.TempDir(), t.TempDir()
			link := filepath.Join(dir, filepath.FromSlash(tt.link))
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			written, err := writeArtifacts(dir, []runs.Artifact{{Path: tt.path, Size: 1, Data: []byte("x")}})
			if err == nil {
				t.Errorf("%s written through the symlink %s: %v", tt.path, tt.link, written)
			}
			entries, _ := os.ReadDir(outside)
			if len(entries) != 0 {
				t.Errorf("the link's target holds %d entries, want none", len(entries))
			}
		})
	}
}

// fakeRunsAPI answers POST /v1/runs, GET /v1/runs/{id} and its events with
// final as the finished run (its stdout as one output event).
func fakeRunsAPI(t *testing.T, final runs.Status) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(runs.Status{ID: final.ID, State: runs.StateQueued})
	})
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(final)
	})
	mux.HandleFunc("GET /v1/runs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		enc := json.NewEncoder(w)
		enc.Encode(runs.Event{Seq: 1, Type: runs.EventOutput, Stream: runs.StreamStdout, Phase: runs.PhaseMain, Data: []byte(final.Stdout)})
		enc.Encode(runs.Event{Seq: 2, Type: runs.EventResult, Status: &final})
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestRunSaysOutputWasCut: `sandbox-host run` and `run show` say that the
// host cut the output, with the bytes dropped; an uncut run says nothing.
func TestRunSaysOutputWasCut(t *testing.T) {
	zero := 0
	id := strings.Repeat("ab", 16)
	cut := runs.Status{ID: id, State: runs.StateFinished, Result: runs.ResultOK, ExitCode: &zero, Stdout: "yyyy",
		StdoutTruncated: true, StdoutDroppedBytes: 314572800}
	sock := fakeRunsAPI(t, cut)
	code, stdout, stderr := runCLI("--socket", sock, "run", "--", "yes")
	want := "sandbox-host: run " + id + ": stdout cut at the host's output bound, 314572800 bytes dropped (runs.maxOutputBytes)\n"
	if code != 0 || stdout != "yyyy" || !strings.HasSuffix(stderr, want) {
		t.Errorf("run: %d stdout %q stderr %q, want the cut said last", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI("--socket", sock, "run", "show", id); code != 0 || !strings.Contains(stdout, "stdout-cut=314572800-bytes-dropped") {
		t.Errorf("run show: %d %q", code, stdout)
	}
	whole := cut
	whole.StdoutTruncated, whole.StdoutDroppedBytes = false, 0
	sock = fakeRunsAPI(t, whole)
	if code, _, stderr := runCLI("--socket", sock, "run", "--", "yes"); code != 0 || strings.Contains(stderr, "cut") {
		t.Errorf("an uncut run: %d stderr %q", code, stderr)
	}
}

// TestRunArtifactPathsNeverRawToTheTerminal: an artifact path is the run's
// choice; an escape sequence or a direction override in it is printed
// quoted, never raw.
func TestRunArtifactPathsNeverRawToTheTerminal(t *testing.T) {
	zero := 0
	id := strings.Repeat("cd", 16)
	st := runs.Status{ID: id, State: runs.StateFinished, Result: runs.ResultOK, ExitCode: &zero,
		Artifacts: []runs.Artifact{{Path: "a\x1b[2Jb.txt", Size: 3}, {Path: "invoice\u202efdp.exe", Error: "missing"}}}
	sock := fakeRunsAPI(t, st)
	code, _, stderr := runCLI("--socket", sock, "run", "--", "true")
	if code != 0 || strings.Contains(stderr, "\x1b") || strings.Contains(stderr, "\u202e") {
		t.Errorf("run: %d stderr %q, want the paths escaped", code, stderr)
	}
	if !strings.Contains(stderr, `"a\x1b[2Jb.txt"`) || !strings.Contains(stderr, `"invoice\u202efdp.exe"`) {
		t.Errorf("stderr %q lacks the quoted paths", stderr)
	}
}

// TestRunCredentialFlag: --credential (repeatable) asks for credentialed
// destinations by name; the wait for approval and `run show` name them.
func TestRunCredentialFlag(t *testing.T) {
	zero := 0
	id := strings.Repeat("ef", 16)
	final := runs.Status{ID: id, State: runs.StateFinished, Result: runs.ResultOK, ExitCode: &zero, Network: true,
		Credentials: []string{"git", "api"}}
	sock := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	posted := make(chan runs.Params, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		var p runs.Params
		json.NewDecoder(r.Body).Decode(&p)
		posted <- p
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(runs.Status{ID: id, State: runs.StateAwaitingApproval, Network: true, Credentials: p.Credentials})
	})
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(final) })
	mux.HandleFunc("GET /v1/runs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(runs.Event{Seq: 1, Type: runs.EventResult, Status: &final})
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	code, _, stderr := runCLI("--socket", sock, "run", "--network", "--credential", "git", "--credential", "api", "--", "true")
	if code != 0 {
		t.Fatalf("run: %d %q", code, stderr)
	}
	if p := <-posted; !slices.Equal(p.Credentials, []string{"git", "api"}) || !p.Network {
		t.Errorf("posted %+v, want the credentials and network", p)
	}
	if !strings.Contains(stderr, "approval of network with the credentials git, api") {
		t.Errorf("stderr %q does not name the credentials awaiting approval", stderr)
	}
	if code, stdout, _ := runCLI("--socket", sock, "run", "show", id); code != 0 || !strings.Contains(stdout, "credentials=git,api") {
		t.Errorf("run show: %d %q", code, stdout)
	}
}

// TestCredentialsShown: the approval line and run show name each
// credential with the variable the run sees its placeholder in.
func TestCredentialsShown(t *testing.T) {
	st := runs.Status{Credentials: []string{"git", "api"}, CredentialVariables: map[string]string{"git": "GIT_TOKEN"}}
	if got := strings.Join(credentialsShown(st), ","); got != "git(GIT_TOKEN),api" {
		t.Errorf("credentialsShown = %q, want git(GIT_TOKEN),api", got)
	}
}

// TestRunCredentialsCommand: run credentials asks for --project's list and
// prints each credential with its variable and destination.
func TestRunCredentialsCommand(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		json.NewEncoder(w).Encode(runs.CredentialList{Credentials: []runs.Credential{{Name: "gh", Variable: "GITHUB_TOKEN", Host: "api.github.com", Port: 443}}})
	})}
	go srv.Serve(ln)
	defer srv.Close()
	code, stdout, stderr := runCLI("--socket", sock, "run", "credentials", "--project", "web")
	if code != 0 || stdout != "gh $GITHUB_TOKEN https://api.github.com:443\n" {
		t.Errorf("got %d %q %q", code, stdout, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked, []string{"/v1/credentials?project=web"}) {
		t.Errorf("asked %q", asked)
	}
}
