//go:build !race

package coderun_test

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = false
