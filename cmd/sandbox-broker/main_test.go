package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

func run(args ...string) (string, error) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run("version")
	if err != nil || strings.TrimSpace(out) != version.Version {
		t.Errorf("version = %q, %v", out, err)
	}
}

func TestServeRefusesBadTurn(t *testing.T) {
	for _, turn := range []string{"", "../x", "0123456789ABCDEF0123456789ABCDEF"} {
		if _, err := run("serve", "--turn", turn, "--policy-dir", t.TempDir(), "--credentials-dir", t.TempDir(), "--listen", filepath.Join(t.TempDir(), "s")); err == nil {
			t.Errorf("turn %q accepted", turn)
		}
	}
}

func TestServeExitsAtDeadline(t *testing.T) {
	dir := t.TempDir()
	p := &policy.Policy{Version: 1, TurnID: ids.NewTurnID(), Identity: policy.Identity{Channel: "c", ChannelTag: "c"},
		DeadlineUnixMs: time.Now().Add(600 * time.Millisecond).UnixMilli(),
		Model:          policy.Model{URL: "https://api.example.invalid/v1/chat/completions", Name: "m", MaxTokens: 10, Credential: "k"},
		MCP:            []policy.MCPServer{{Name: "docs", URL: "https://mcp.example.invalid/mcp", Session: policy.SessionAuto, Tools: []string{"search"}}},
		Limits:         policy.DefaultLimits()}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, p.TurnID+".json"), data, 0o600)
	os.Unsetenv("LISTEN_FDS")
	start := time.Now()
	if _, err := run("serve", "--turn", p.TurnID, "--policy-dir", dir, "--credentials-dir", dir, "--listen", filepath.Join(dir, "b.sock")); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("serve lasted %v past a 600 ms deadline", d)
	}
}
