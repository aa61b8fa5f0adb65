//go:build !race

package protocol

// raceEnabled: this test binary runs under the race detector (its
// single-goroutine searches run in make unit's second pass, without it).
const raceEnabled = false
