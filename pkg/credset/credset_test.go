package credset

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

const turn = "0123456789abcdef0123456789abcdef"

func writePolicy(t *testing.T, dir string, mutate func(*policy.Policy)) {
	t.Helper()
	p := &policy.Policy{
		Version: policy.Version, TurnID: turn,
		Identity:       policy.Identity{Channel: "c", ChannelTag: "c", SpeakerID: "s"},
		DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
		Model:          policy.Model{URL: "https://api.example.com/v1", Name: "m", MaxTokens: 10, Credential: "model"},
		Limits:         policy.DefaultLimits(),
	}
	if mutate != nil {
		mutate(p)
	}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, turn+".json"), data, 0o640); err != nil {
		t.Fatal(err)
	}
}

func TestCopyOnlyWhatThePolicyNames(t *testing.T) {
	root := t.TempDir()
	pol, from, out := filepath.Join(root, "pol"), filepath.Join(root, "creds"), filepath.Join(root, "out")
	for _, d := range []string{pol, from, out} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range map[string]string{"model": "sk-model", "tool-key": "sk-tool", "other-channel": "sk-other", "unused": "sk-unused"} {
		if err := os.WriteFile(filepath.Join(from, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(from, "other-channel"), filepath.Join(from, "linked")); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, pol, func(p *policy.Policy) {
		p.Tools = []policy.Tool{{Name: "a", Kind: policy.KindHTTP, URL: "https://t.example.com/", TimeoutMs: 1000, Credential: "tool-key"},
			{Name: "b", Kind: policy.KindHTTP, URL: "https://t.example.com/", TimeoutMs: 1000, Credential: "linked"}}
		p.MCP = []policy.MCPServer{{Name: "s", URL: "https://m.example.com/", Session: policy.SessionAuto, Tools: []string{"x"}, Credential: "absent"}}
	})
	r, err := Copy(turn, pol, from, out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Copied, []string{"model", "tool-key"}) || !slices.Equal(r.Missing, []string{"absent"}) || !slices.Equal(r.Skipped, []string{"linked"}) {
		t.Errorf("result %+v, want copied [model tool-key], missing [absent], skipped [linked]", r)
	}
	ents, _ := os.ReadDir(out)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		st, _ := os.Lstat(filepath.Join(out, e.Name()))
		if st.Mode().Perm() != 0o400 || !st.Mode().IsRegular() {
			t.Errorf("%s: mode %v, want a regular 0400 file", e.Name(), st.Mode())
		}
	}
	if !slices.Equal(names, []string{"model", "tool-key"}) {
		t.Errorf("output holds %v, want exactly [model tool-key]", names)
	}
	if data, _ := os.ReadFile(filepath.Join(out, "tool-key")); string(data) != "sk-tool\n" {
		t.Errorf("tool-key copy = %q", data)
	}
	// A second run never overwrites (O_EXCL): the directory is per start.
	if _, err := Copy(turn, pol, from, out); err == nil {
		t.Errorf("a second copy into the same directory succeeded")
	}
}

// A placeholder that lists no names gets none: nothing the host writes
// today lacks the list (the model credential is required), and copying
// every credential for it would undo least credential.
func TestPlaceholderWithoutNamesGetsNothing(t *testing.T) {
	root := t.TempDir()
	from, out := filepath.Join(root, "creds"), filepath.Join(root, "out")
	os.Mkdir(from, 0o700)
	os.Mkdir(out, 0o700)
	for _, n := range []string{"a", "b"} {
		os.WriteFile(filepath.Join(from, n), []byte(n), 0o600)
	}
	pend := &policy.Pending{Version: policy.Version, TurnID: turn, Pending: true, DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()}
	data, err := pend.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, turn+".json"), data, 0o640)
	r, err := Copy(turn, root, from, out)
	if err != nil || !r.Pending || len(r.Copied) != 0 {
		t.Errorf("placeholder without names: copy = %+v, %v; want pending and nothing copied", r, err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("output holds %d files for a placeholder that lists no names, want none", len(ents))
	}
}

// TestPlaceholderListingNamesGetsOnlyThem: a standby's placeholder that
// lists the names its turn will use gets exactly those.
func TestPlaceholderListingNamesGetsOnlyThem(t *testing.T) {
	root := t.TempDir()
	from, out := filepath.Join(root, "creds"), filepath.Join(root, "out")
	os.Mkdir(from, 0o700)
	os.Mkdir(out, 0o700)
	for _, n := range []string{"model", "other-channel", "tool-key"} {
		os.WriteFile(filepath.Join(from, n), []byte(n), 0o600)
	}
	pend := &policy.Pending{Version: policy.Version, TurnID: turn, Pending: true, DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
		Credentials: []string{"model", "tool-key", "absent"}}
	data, err := pend.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, turn+".json"), data, 0o640)
	r, err := Copy(turn, root, from, out)
	if err != nil || !r.Pending || !slices.Equal(r.Copied, []string{"model", "tool-key"}) || !slices.Equal(r.Missing, []string{"absent"}) {
		t.Errorf("placeholder copy = %+v, %v; want pending, [model tool-key] copied, [absent] missing", r, err)
	}
	if _, err := os.Stat(filepath.Join(out, "other-channel")); err == nil {
		t.Error("a credential the placeholder does not list was copied")
	}
}

func TestCopyRefusesABadPolicy(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, turn+".json"), []byte(`{}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(turn, root, root, root); err == nil {
		t.Errorf("an invalid policy was accepted")
	}
	if _, err := Copy("../x", root, root, root); err == nil {
		t.Errorf("a bad turn id was accepted")
	}
	other := t.TempDir()
	writePolicy(t, other, func(p *policy.Policy) { p.TurnID = "ffffffffffffffffffffffffffffffff" })
	if _, err := Copy(turn, other, other, other); err == nil {
		t.Errorf("a policy of another turn was accepted")
	}
}

// TestUnreadableCredentialIsNamed: a credential file the copier may not read
// (no group _sandbox-credset read; the tests run as root, so the refusal is
// the seam's) is neither copied nor mistaken for a missing one, and the copy
// of the others goes on.
func TestUnreadableCredentialIsNamed(t *testing.T) {
	root := t.TempDir()
	pol, from, out := filepath.Join(root, "pol"), filepath.Join(root, "creds"), filepath.Join(root, "out")
	for _, d := range []string{pol, from, out} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"model", "tool-key"} {
		if err := os.WriteFile(filepath.Join(from, n), []byte(n), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	writePolicy(t, pol, func(p *policy.Policy) {
		p.Tools = []policy.Tool{{Name: "a", Kind: policy.KindHTTP, URL: "https://t.example.com/", TimeoutMs: 1000, Credential: "tool-key"}}
	})
	real := readAt
	t.Cleanup(func() { readAt = real })
	readAt = func(dirfd int, name string, max int64) ([]byte, error) {
		if name == "tool-key" {
			return nil, fmt.Errorf("atomicfile: open %s: %w", name, unix.EACCES)
		}
		return real(dirfd, name, max)
	}
	r, err := Copy(turn, pol, from, out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Copied, []string{"model"}) || !slices.Equal(r.Unreadable, []string{"tool-key"}) || len(r.Missing)+len(r.Skipped) != 0 {
		t.Errorf("result %+v, want copied [model], unreadable [tool-key], nothing missing or skipped", r)
	}
	if _, err := os.Stat(filepath.Join(out, "tool-key")); err == nil {
		t.Error("an unreadable credential has a copy")
	}
}
