package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkRunTurnHostOverhead is the host's own per-turn cost with instant
// fakes for Docker and systemd: ids, policy file (fsync), turn directory,
// turn JSON, cleanup, metrics.
func BenchmarkRunTurnHostOverhead(b *testing.B) {
	r := newRig(b, "", nil)
	in := TurnInput{Channel: "bench:1", SpeakerID: "s", SpeakerName: "n", Text: "hello"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := r.h.RunTurn(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunTurnHostOverheadTmpfs keeps the policy file and turn directory
// on tmpfs, as /run is in production.
func BenchmarkRunTurnHostOverheadTmpfs(b *testing.B) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		b.Skip("no /dev/shm")
	}
	r := newRig(b, "", nil)
	dir, err := os.MkdirTemp("/dev/shm", "sbb")
	must(b, err)
	defer os.RemoveAll(dir)
	r.cfg.RunRoot, r.cfg.PolicyDir = filepath.Join(dir, "run"), filepath.Join(dir, "pol")
	must(b, os.Mkdir(r.cfg.RunRoot, 0o700))
	must(b, os.Mkdir(r.cfg.PolicyDir, 0o700))
	r.docker.Cfg = r.cfg
	in := TurnInput{Channel: "bench:1", SpeakerID: "s", SpeakerName: "n", Text: "hello"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := r.h.RunTurn(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}
