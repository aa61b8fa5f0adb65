package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestFleetNkey: the seed file is new, 0600, and its public key is the one
// printed; an existing file is never overwritten.
func TestFleetNkey(t *testing.T) {
	seedFile := filepath.Join(t.TempDir(), "box.nkey")
	code, out, errOut := runCLI("fleet", "nkey", "--output", seedFile, "--owner", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	st, err := os.Stat(seedFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v %v", st, err)
	}
	seed, _ := os.ReadFile(seedFile)
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	if strings.TrimSpace(out) != pub || !nkeys.IsValidPublicUserKey(pub) {
		t.Errorf("printed %q, seed's public key %q", out, pub)
	}
	if strings.Contains(out+errOut, strings.TrimSpace(string(seed))) {
		t.Errorf("the seed was printed")
	}
	code, _, errOut = runCLI("fleet", "nkey", "--output", seedFile, "--owner", "")
	if again, _ := os.ReadFile(seedFile); code == 0 || string(again) != string(seed) || !strings.Contains(errOut, "exists") {
		t.Errorf("second run: exit %d, %q; seed replaced: %v", code, errOut, string(again) != string(seed))
	}
}

// TestFleetConfig: printed from fleet.*; refused with exit 78 naming the
// key when this box cannot run a server.
func TestFleetConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sandbox.yaml")
	body := "model:\n  url: https://api.example.com/v1/chat/completions\n  name: m1\ncredentials:\n  default: model\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI("--config", cfg, "fleet", "config")
	if code != ExitConfig || !strings.Contains(errOut, "fleet.enabled: is false") {
		t.Errorf("fleet off: exit %d, %q", code, errOut)
	}
	body += "fleet:\n  enabled: true\n  box: box-a\n  replicas: 1\n  server:\n    boxes:\n      - {name: box-a, nkey: UBNPNJVB2YTYC3JQVMBICLMRB2BXUUCXGWZXU63HKKDO2Q7XKNWTP62V}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("--config", cfg, "fleet", "config")
	var conf map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &conf) != nil || conf["server_name"] != "box-a" {
		t.Errorf("exit %d, %q, %q", code, out, errOut)
	}
}
