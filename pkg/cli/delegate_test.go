package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
)

// TestDelegateAndJobs drives delegate --wait, jobs show and jobs follow
// against a hand-written host.
func TestDelegateAndJobs(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	const id = "0123456789abcdef0123456789abcdef"
	var got delegation.Request
	done := delegation.Status{ID: id, Channel: "c", Title: "T", State: delegation.StateDone, Result: "ok", Report: "the report",
		DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/channels/c/delegations":
			json.NewDecoder(r.Body).Decode(&got)
			if got.Task == "too long" {
				w.WriteHeader(400)
				w.Write([]byte(`{"error":"the task is 5000 characters; keep it within 4000"}`))
				return
			}
			w.WriteHeader(202)
			json.NewEncoder(w).Encode(delegation.Status{ID: id, Channel: "c", Title: got.Title, State: "queued", DeadlineUnixMs: done.DeadlineUnixMs})
		case r.URL.Path == "/v1/jobs/"+id:
			json.NewEncoder(w).Encode(done)
		case r.URL.Path == "/v1/channels/c/jobs/events":
			json.NewEncoder(w).Encode(delegation.Event{Type: "keepalive"})
			json.NewEncoder(w).Encode(delegation.Event{Type: "job", Job: &done})
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			w.WriteHeader(404)
			w.Write([]byte(`{"error":"not found"}`))
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"--socket", sock}, args...), Inputs{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		return code, out.String(), errb.String()
	}
	taskFile := filepath.Join(dir, "task.txt")
	os.WriteFile(taskFile, []byte("Find the prices\n"), 0o600)
	if code, out, errs := run("delegate", "c", "--title", "T", "--task-file", taskFile, "--author-id", "a", "--author-name", "Ann", "--wait"); code != 0 || out != "the report\n" {
		t.Errorf("delegate --wait: %d %q %q", code, out, errs)
	}
	if got.Task != "Find the prices\n" || got.Author.ID != "a" || got.Author.Name != "Ann" || got.Title != "T" {
		t.Errorf("request %+v", got)
	}
	if code, out, _ := run("delegate", "c", "--title", "T", "--task", "x", "--author-id", "a"); code != 0 || out != id+"\n" {
		t.Errorf("delegate: %d %q", code, out)
	}
	if code, _, errs := run("delegate", "c", "--title", "T", "--task", "too long", "--author-id", "a"); code == 0 || !strings.Contains(errs, "the task is 5000 characters; keep it within 4000") {
		t.Errorf("refusal: %d %q", code, errs)
	}
	if code, _, errs := run("delegate", "c", "--title", "T", "--task", "x", "--task-file", taskFile, "--author-id", "a"); code == 0 || !strings.Contains(errs, "exactly one of --task or --task-file") {
		t.Errorf("both task flags: %d %q", code, errs)
	}
	if code, out, _ := run("jobs", "show", id); code != 0 || out != "the report\n" {
		t.Errorf("jobs show: %d %q", code, out)
	}
	code, out, errs := run("--json", "jobs", "follow", "c", "--count", "1")
	var st delegation.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Report != "the report" || st.ID != id {
		t.Errorf("jobs follow: %d %q %q", code, out, errs)
	}
}
