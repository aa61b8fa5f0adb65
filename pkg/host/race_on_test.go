//go:build race

package host

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
