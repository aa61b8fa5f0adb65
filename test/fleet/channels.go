package fleet

import (
	"fmt"

	pfleet "github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// ChannelNames are the n channels a driver with prefix runs: spread over
// the partitions round-robin (channel i is on partition i mod partitions),
// so that n >= partitions puts turns on every partition and a partition
// left without an owner shows as a channel that never answers.
func ChannelNames(prefix string, n, partitions int) []string {
	byPart := make([][]string, partitions)
	perPart := (n + partitions - 1) / partitions
	for j, full := 0, 0; full < partitions; j++ {
		name := fmt.Sprintf("%s-%03d", prefix, j)
		p := pfleet.Partition(name, partitions)
		if len(byPart[p]) < perPart {
			if byPart[p] = append(byPart[p], name); len(byPart[p]) == perPart {
				full++
			}
		}
	}
	out := make([]string, 0, n)
	for k := 0; len(out) < n; k++ {
		out = append(out, byPart[k%partitions][k/partitions])
	}
	return out
}
