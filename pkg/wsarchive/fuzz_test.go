package wsarchive

import (
	"strings"
	"testing"
)

// FuzzDecode: whatever another box wrote, Decode never panics, and what it
// accepts stays within its bounds and beneath the workspace.
func FuzzDecode(f *testing.F) {
	f.Add(enc())
	f.Add(enc(ent(kindDir, 0o755, "a"), ent(kindFile, 0o644, "a/f", "data")))
	f.Add(enc(ent(kindFile, 0o600, "../x", "data")))
	f.Add(enc(ent(kindFile, 0o600, "f", "x"), ent(kindFile, 0o600, "f", "y")))
	f.Add([]byte(magic + "d\x01\xed\x00\x01a"))
	lim := Limits{MaxBytes: 1 << 16, MaxEntries: 64, MaxDepth: 4}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Decode(data, lim)
		if err != nil {
			return
		}
		if len(entries) > lim.MaxEntries {
			t.Fatalf("%d entries accepted, limit %d", len(entries), lim.MaxEntries)
		}
		seen := map[string]bool{}
		for _, e := range entries {
			if e.Path == "" || strings.HasPrefix(e.Path, "/") || seen[e.Path] {
				t.Fatalf("accepted path %q", e.Path)
			}
			for _, c := range strings.Split(e.Path, "/") {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("accepted path %q", e.Path)
				}
			}
			seen[e.Path] = true
			if e.Mode&^0o755 != 0 || e.Mode&0o600 != 0o600 {
				t.Fatalf("accepted mode %o", e.Mode)
			}
		}
	})
}
