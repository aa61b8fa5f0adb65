//go:build race

package anthropic

// raceEnabled: this test binary runs under the race detector (its tests
// that move tens of MiB run in make unit's second pass, without it).
const raceEnabled = true
