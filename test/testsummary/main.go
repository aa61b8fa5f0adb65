// Command testsummary reads `go test -json` (or `go tool test2json`) events on
// stdin and prints what a person needs from a test stage: one line per
// package that ran tests, the full output of every failed test, and at the
// end how many tests ran, passed, failed and were skipped, with the skip
// reasons grouped. Packages without tests (or, under -run, without matching
// tests) are counted on one line instead of one "[no tests to run]" each.
//
// Guarantee: it exits 1 when any test, package or build failed, or when the
// stream was not test JSON; 0 otherwise. It never drops a failed test's
// output. With -line FILE it appends the stage's one-line summary to FILE
// (make test prints those lines again at the end).
//
// With -tally it also prints, per test that failed at least once, how many
// of its runs failed (for -count runs and several streams concatenated).
//
// Usage: go test -json ./... | testsummary -stage unit [-v] [-line FILE] [-tally]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	stage := flag.String("stage", "tests", "stage name printed in the summary")
	verbose := flag.Bool("v", false, "print every output line as it arrives (as go test -v does)")
	line := flag.String("line", "", "append the one-line summary to this file")
	tally := flag.Bool("tally", false, "print per test how many of its runs failed (make stress)")
	flag.Parse()
	s := newSummary(*stage, *verbose, os.Stdout)
	s.start = time.Now()
	err := s.read(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stdout, "testsummary: %v\n", err)
	}
	s.report()
	if *tally {
		fmt.Fprint(os.Stdout, s.flakeReport())
	}
	if *line != "" {
		if werr := appendLine(*line, s.oneLine()); werr != nil {
			fmt.Fprintf(os.Stdout, "testsummary: %v\n", werr)
		}
	}
	if err != nil || s.anyFailed() {
		os.Exit(1)
	}
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, line+"\n")
	return errors.Join(err, f.Close())
}

// seconds formats a duration the way go test does.
func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
