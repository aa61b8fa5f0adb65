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

	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
)

// TestPrecheckCommand drives precheck against a hand-written host: the
// request it sends, each answer's printing, --json and a refusal.
func TestPrecheckCommand(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var got precheck.Request
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/prechecks" {
			w.WriteHeader(404)
			return
		}
		got = precheck.Request{}
		json.NewDecoder(r.Body).Decode(&got)
		yes, no := true, false
		switch got.Schedule {
		case "wake":
			json.NewEncoder(w).Encode(precheck.Answer{Wake: &yes, Context: "the context"})
		case "quiet":
			json.NewEncoder(w).Encode(precheck.Answer{Wake: &no, Note: "the note"})
		case "throw":
			json.NewEncoder(w).Encode(precheck.Answer{Error: "the script threw: x"})
		default:
			w.WriteHeader(403)
			w.Write([]byte(`{"error":"grant search:secret is not allowed for this channel (prechecks.grants)"}`))
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	script := filepath.Join(dir, "check.js")
	os.WriteFile(script, []byte("export default async () => ({ wake: false })"), 0o600)
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"--socket", sock}, args...), Inputs{Stdin: strings.NewReader("export default 1"), Stdout: &out, Stderr: &errb})
		return code, out.String(), errb.String()
	}
	code, out, errs := run("precheck", "--channel", "room", "--script", script, "--grant", "search:lookup", "--grant", "search:find",
		"--fired-at", "2026-11-30T23:05:00Z", "--time-zone", "Europe/Berlin", "--target", "t1", "--schedule", "wake")
	if code != 0 || out != "wake\nthe context\n" {
		t.Errorf("wake: %d %q %q", code, out, errs)
	}
	if got.Channel != "room" || got.Script != "export default async () => ({ wake: false })" || got.FiredAt != "2026-11-30T23:05:00Z" ||
		got.TimeZone != "Europe/Berlin" || got.Target != "t1" || len(got.Grants) != 2 || got.Grants[1] != (precheck.Grant{Server: "search", Tool: "find"}) {
		t.Errorf("request %+v", got)
	}
	if code, out, _ := run("precheck", "--channel", "room", "--script", "-", "--schedule", "quiet"); code != 0 || out != "no wake\nthe note\n" || got.Script != "export default 1" {
		t.Errorf("no wake: %d %q (script %q)", code, out, got.Script)
	}
	if code, out, _ := run("precheck", "--channel", "room", "--script", script, "--schedule", "throw"); code != 0 || out != "error (wakes the turn): the script threw: x\n" {
		t.Errorf("throw: %d %q", code, out)
	}
	if code, out, _ := run("--json", "precheck", "--channel", "room", "--script", script, "--schedule", "wake"); code != 0 || !json.Valid([]byte(out)) || !strings.Contains(out, `"context": "the context"`) {
		t.Errorf("json: %d %q", code, out)
	}
	if code, _, errs := run("precheck", "--channel", "room", "--script", script, "--grant", "search:secret"); code != 1 || !strings.Contains(errs, "grant search:secret is not allowed") {
		t.Errorf("refused: %d %q", code, errs)
	}
	if code, _, errs := run("precheck", "--channel", "room", "--script", script, "--grant", "nocolon"); code != 1 || !strings.Contains(errs, `--grant "nocolon": write it as server:tool`) {
		t.Errorf("bad grant: %d %q", code, errs)
	}
	big := filepath.Join(dir, "big.js")
	os.WriteFile(big, bytes.Repeat([]byte("x"), precheck.MaxScriptBytes+1), 0o600)
	if code, _, errs := run("precheck", "--channel", "room", "--script", big); code != 1 || !strings.Contains(errs, "is over 65536 bytes") {
		t.Errorf("big script: %d %q", code, errs)
	}
}
