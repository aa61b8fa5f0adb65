package e2e

// Scoped delegation (DESIGN.md section 14) end to end: the installed host
// and CLI, the fake model scripting the research turn, safefetch through
// the broker. This file sorts after scenarios_test.go (see
// tail_egress_test.go): it changes the host's configuration.

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// TestDelegationThroughCLI: `sandbox-host delegate` admits a job; its
// research turn (only the fetch and search tools offered to the model)
// fetches a page through the broker; the report reaches `jobs follow` and
// `jobs show`; nothing is left afterwards, the scratch workspace included;
// the seed's refusal reaches the CLI word for word.
func TestDelegationThroughCLI(t *testing.T) {
	diagnose(t)
	var hits atomic.Int64
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<html><head><title>e2e research</title></head><body><p>RESEARCH-BODY-5c1e</p></body></html>")
	}))
	defer page.Close()
	_, port, _ := net.SplitHostPort(page.Listener.Addr().String())
	c := baseConfig()
	c.FetchAllow = "127.0.0.1:" + port
	withConfig(t, c)
	const ch = "e2e-delegate"
	channelOn(t, ch)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")

	taskFile := filepath.Join(env.work, "delegate-task.txt")
	if err := os.WriteFile(taskFile, []byte("E2E-DELEGATE read this page and report\n"+page.URL+"/research"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := cli("delegate", ch, "--title", "E2E research", "--task-file", taskFile, "--author-id", "alice", "--author-name", "Alice")
	id := strings.TrimSpace(out)
	if err != nil || len(id) != 32 {
		t.Fatalf("sandbox-host delegate: %v: %s", err, out)
	}
	out, err = cli("--json", "jobs", "follow", ch, "--count", "1")
	if err != nil {
		t.Fatalf("jobs follow: %v: %s", err, out)
	}
	took := time.Since(start)
	var followed delegation.Status
	if err := json.Unmarshal([]byte(out), &followed); err != nil {
		t.Fatalf("jobs follow --json: %v: %s", err, out)
	}
	wantReport := `report: "e2e research\nRESEARCH-BODY-5c1e"`
	if followed.ID != id || followed.State != delegation.StateDone || followed.Report != wantReport || followed.Title != "E2E research" {
		t.Errorf("followed job %+v, want %s done with %q", followed, id, wantReport)
	}
	t.Logf("delegation from the CLI to its report on the stream: %v", took.Round(time.Millisecond))
	if out, err := cli("jobs", "show", id); err != nil || strings.TrimSpace(out) != wantReport {
		t.Errorf("jobs show: %v: %q", err, out)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the page was fetched %d times, want 1", n)
	}

	// The model saw only the research tools (and the invalid-tool placeholder).
	recs := recordsForUser(env.modelRec, "E2E-DELEGATE")
	if len(recs) != 2 {
		t.Fatalf("%d model requests for the research turn, want 2", len(recs))
	}
	var body struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(recs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range body.Tools {
		names = append(names, tl.Function.Name)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasPrefix(n, "mcp_") || strings.HasPrefix(n, "memory_") || n == "host_clock" {
			t.Errorf("research turn offered %s (tools %v)", n, names)
		}
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "host_fetch") || !strings.Contains(got, "host_whoami") {
		t.Errorf("research turn tools %v lack host_fetch or host_whoami (the search tool)", names)
	}
	if sys, _ := json.Marshal(body.Messages[0]); !strings.Contains(string(sys), "research worker") {
		t.Errorf("system prompt is not the research prompt: %.200s", sys)
	}

	// Nothing left: no container, unit, turn directory, policy file or
	// scratch workspace; the job is no longer listed.
	assertNothingLeft(t, "after the delegated job")
	if left := dirEntries(filepath.Join(layout.WorkspaceRoot, ".delegations")); len(left) != 0 {
		t.Errorf("scratch workspaces left: %v", left)
	}
	for _, tr := range activeTurns(t) {
		if tr.ID == id {
			t.Errorf("finished job still listed in GET /v1/turns")
		}
	}
	// Journald: the host's lines name the job; the worker's lines are under
	// the channel's tag.
	if logs := journal("-u", layout.HostService, "--since", since); !strings.Contains(logs, "delegation done") || !strings.Contains(logs, id) {
		t.Errorf("host journal lacks the job's lines")
	}
	if msg := eventually(15*time.Second, func() string {
		logs := journal("SANDBOX_TURN="+id, "-o", "json")
		if !strings.Contains(logs, `"SYSLOG_IDENTIFIER":"sandbox/`+ch+`"`) || !strings.Contains(logs, "turn finished") {
			return "the worker's lines of the job are not in the journal under sandbox/" + ch
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
	if m := metricsText(t); !strings.Contains(m, `sandbox_delegations_total{result="ok"} 1`) {
		t.Errorf("metrics lack sandbox_delegations_total{result=\"ok\"} 1")
	}

	// The seed's refusal, word for word, through the CLI.
	long := filepath.Join(env.work, "delegate-long.txt")
	os.WriteFile(long, []byte(strings.Repeat("x", 4001)), 0o600)
	out, err = cli("delegate", ch, "--title", "T", "--task-file", long, "--author-id", "alice")
	if err == nil || !strings.Contains(out, "the task is 4001 characters; keep it within 4000") {
		t.Errorf("long task: %v: %s", err, out)
	}
}

// metricsText is GET /metrics.
func metricsText(t *testing.T) string {
	t.Helper()
	r := api(http.MethodGet, "/metrics", nil)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %s", r)
	}
	return r.Raw
}
