// Command sandbox-bench is the benchmark driver behind `make bench`
// (bench/run.sh): each subcommand measures one thing and writes one JSON
// results file; `report` turns the results directory into docs/BENCHMARKS.md.
// It is a measuring tool, not a test: nothing here asserts a timing.
package main

import (
	"fmt"
	"log/slog"
	"os"
)

var commands = map[string]func(args []string) error{
	"bundle":       cmdBundle,
	"fixedcost":    cmdFixedCost,
	"broker":       cmdBroker,
	"load":         cmdLoad,
	"backtoback":   cmdBackToBack,
	"fakemodel":    cmdFakeModel,
	"env":          cmdEnv,
	"report":       cmdReport,
	"ready":        cmdReady,
	"policy":       cmdPolicy,
	"phases":       cmdPhases,
	"variants":     cmdVariants,
	"standbymem":   cmdStandbyMem,
	"runtimes":     cmdRuntimes,
	"runs":         cmdRuns,
	"sessions":     cmdSessions,
	"burst":        cmdBurst,
	"units":        cmdUnits,
	"unitvariants": cmdUnitVariants,
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: sandbox-bench bundle|fixedcost|broker|load|backtoback|fakemodel|env|ready|policy|phases|variants|standbymem|runtimes|runs|sessions|burst|units|unitvariants|report [flags]")
		os.Exit(2)
	}
	if err := commands[os.Args[1]](os.Args[2:]); err != nil {
		slog.Error(os.Args[1]+" failed", "err", err)
		os.Exit(1)
	}
}
