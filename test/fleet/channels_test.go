package fleet

import (
	"testing"

	pfleet "github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

func TestChannelNamesCoverThePartitions(t *testing.T) {
	tests := []struct{ n, partitions int }{{12, 6}, {48, 16}, {1, 16}, {7, 3}}
	for _, tt := range tests {
		names := ChannelNames("x", tt.n, tt.partitions)
		if len(names) != tt.n {
			t.Fatalf("%d channels on %d partitions: got %d names", tt.n, tt.partitions, len(names))
		}
		seen := map[string]bool{}
		for i, name := range names {
			if seen[name] {
				t.Errorf("%d on %d: %s twice", tt.n, tt.partitions, name)
			}
			seen[name] = true
			if got, want := pfleet.Partition(name, tt.partitions), i%tt.partitions; got != want {
				t.Errorf("%d on %d: channel %d (%s) on partition %d, want %d", tt.n, tt.partitions, i, name, got, want)
			}
		}
	}
}
