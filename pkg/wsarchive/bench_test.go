package wsarchive

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// benchWorkspace is a sealed workspace's shape: a history and a memory
// store, a few session files; size bytes in all.
func benchWorkspace(b *testing.B, size int) string {
	dir := b.TempDir()
	write(b, filepath.Join(dir, "memory.json"), strings.Repeat("m", size/4), 0o600)
	write(b, filepath.Join(dir, "history.json"), strings.Repeat("h", size/4), 0o600)
	for i := 0; i < 8; i++ {
		write(b, filepath.Join(dir, "sessions", fmt.Sprintf("%d.jsonl", i)), strings.Repeat("s", size/16), 0o600)
	}
	return dir
}

func BenchmarkPack(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			dir := benchWorkspace(b, size)
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				if _, _, err := Pack(dir, DefaultLimits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUnpack(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			data, _, err := Pack(benchWorkspace(b, size), DefaultLimits)
			if err != nil {
				b.Fatal(err)
			}
			dst := b.TempDir()
			b.SetBytes(int64(size))
			for i := 0; i < b.N; i++ {
				if err := Unpack(dst, data, DefaultLimits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
