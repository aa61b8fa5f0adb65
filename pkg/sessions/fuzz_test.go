package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpen writes arbitrary bytes as the only session file: Open either
// accepts it (and a further Append keeps it a valid session) or fails with
// ErrCorrupt and leaves it byte for byte untouched; it never panics.
func FuzzOpen(f *testing.F) {
	f.Add([]byte(`{"type":"session","id":"h1","timestamp":"2026-11-30T10:00:00Z","version":1}` + "\n"))
	f.Add([]byte(`{"type":"session","id":"h1","timestamp":"2026-11-30T10:00:00Z","version":1}` + "\n" +
		`{"type":"user","id":"u1","timestamp":"2026-11-30T10:00:01Z","content":"hi"}` + "\n" +
		`{"type":"compaction","id":"c1","timestamp":"2026-11-30T10:00:02Z","compaction":{"summary":"s","firstKeptEntryId":"u1","tokensBefore":1,"tokensAfter":1,"engine":"e"}}` + "\n"))
	for _, data := range corruptCases(nil) {
		if len(data) < 4096 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ws := t.TempDir()
		dir := filepath.Join(ws, DirName)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "s"+Ext)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(ws)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open failed outside ErrCorrupt: %v", err)
			}
			if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
				t.Fatal("a refused file changed")
			}
			return
		}
		defer s.Close()
		if s.Name() != "s"+Ext {
			t.Fatalf("opened %s", s.Name())
		}
		if _, err := s.Append(user("more")); err != nil {
			t.Fatalf("Append to an accepted session: %v", err)
		}
		s.Close()
		s2, err := Open(ws)
		if err != nil {
			t.Fatalf("an accepted session with one more entry no longer opens: %v", err)
		}
		s2.Close()
	})
}

// FuzzCompactorAnswer: the parsers of what crosses the broker (a request
// from the worker, a compactor's answer, a report) never panic, and what
// they accept is within its bounds and re-encodes to something they accept.
func FuzzCompactorAnswer(f *testing.F) {
	f.Add([]byte(`{"summary":"S","firstKeptEntryId":"k1","tokensBefore":310000,"estimatedTokensAfter":9000,"details":{"engine":"x"}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"reason":"threshold","tokensBefore":1,"firstKeptEntryId":"k","isSplitTurn":false,"messagesToSummarize":[{}],"turnPrefixMessages":[],"keptMessages":[],"readFiles":["a"],"modifiedFiles":[]}`))
	f.Add([]byte(`{"event":"compacted","trigger":"ceiling","engine":"worker","tokensBefore":1,"tokensAfter":1,"contextAfter":1,"nextCompactionAt":1}`))
	req := validRequest()
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := ParseCompaction(data, req); err == nil && c != nil {
			if c.Summary == "" || len(c.Summary) > MaxSummaryBytes || c.FirstKeptEntryID != req.FirstKeptEntryID {
				t.Fatalf("accepted out of bounds: %+v", c)
			}
			again, _ := json.Marshal(c)
			if c2, err := ParseCompaction(again, req); err != nil || c2 == nil {
				t.Fatalf("re-encoded compaction refused: %v", err)
			}
		}
		if r, err := ParseCompactRequest(data); err == nil {
			again, err := json.Marshal(r)
			if err != nil {
				t.Fatalf("accepted request does not encode: %v", err)
			}
			if _, err := ParseCompactRequest(again); err != nil {
				t.Fatalf("re-encoded request refused: %v", err)
			}
		}
		if r, err := ParseReport(data); err == nil && (!validName(r.Engine) || r.TokensBefore < 0) {
			t.Fatalf("accepted report out of bounds: %+v", r)
		}
	})
}
