package sessions

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkAppend: one fsynced 4 KiB entry.
func BenchmarkAppend(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := user(strings.Repeat("x", 4096))
	b.SetBytes(4096)
	for b.Loop() {
		if _, err := s.Append(e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen: continuing a session of 10,000 entries of 4 KiB (41 MB)
// with a compaction every 1,000.
func BenchmarkOpen(b *testing.B) {
	ws := b.TempDir()
	s, err := Open(ws)
	if err != nil {
		b.Fatal(err)
	}
	text, _ := json.Marshal([]map[string]string{{"type": "text", "text": strings.Repeat("y", 4096)}})
	var keep string
	for i := 0; i < 10_000; i++ {
		e, err := s.Append(Entry{Type: TypeAssistant, Content: text})
		if err != nil {
			b.Fatal(err)
		}
		if i%1000 == 990 {
			keep = e.ID
		}
		if i%1000 == 999 {
			s.Append(Entry{Type: TypeCompaction, Compaction: &CompactionRecord{Summary: "s", FirstKeptEntryID: keep, Engine: EngineWorker}})
		}
	}
	size := s.Size()
	s.Close()
	b.SetBytes(size)
	for b.Loop() {
		s, err := Open(ws)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
