package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// unitVariant is the installed units with one drop-in (none: as shipped).
type unitVariant struct {
	name, unit, dropin string
}

// noFSNamespace resets every setting that makes systemd build a mount
// namespace for the unit (attribution only: never a candidate to ship).
const noFSNamespace = `ProtectSystem=no
ProtectHome=no
PrivateTmp=no
PrivateDevices=no
PrivateMounts=no
ProtectKernelTunables=no
ProtectKernelModules=no
ProtectKernelLogs=no
ProtectControlGroups=no
ProtectClock=no
ProtectHostname=no
ProtectProc=default
ProcSubset=all
`

// beforeIssue35 is the credential set as shipped before issue 35: root
// (group _sandbox-broker), confined by a mount namespace of its own
// (read-only system, credentials read-only, private /tmp, /dev, IPC) and a
// network namespace. The shipped unit runs as _sandbox-credset without a
// mount namespace (units/sandbox-credset@.service, issue 35).
const beforeIssue35 = `User=root
Group=_sandbox-broker
SupplementaryGroups=
ProtectSystem=strict
ReadOnlyPaths=/etc/roundtable-sandbox/credentials
ProtectHome=yes
PrivateTmp=yes
PrivateMounts=yes
PrivateDevices=yes
PrivateIPC=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectProc=invisible
ProcSubset=pid
`

var unitVariants = []unitVariant{
	{name: "as installed"},
	{name: "credential set: as before issue 35 (root, own mount and network namespace)", unit: "sandbox-credset@.service", dropin: "[Service]\n" + beforeIssue35},
	{name: "credential set: PrivateNetwork=no", unit: "sandbox-credset@.service", dropin: "[Service]\nPrivateNetwork=no\n"},
	{name: "broker: no mount namespace (attribution only)", unit: "sandbox-broker@.service", dropin: "[Service]\n" + noFSNamespace + "TemporaryFileSystem=\nBindReadOnlyPaths=\nPrivateIPC=no\n"},
}

// pickVariants keeps the installed units (always first: the base of every
// comparison) and the variants whose name matches only (all when empty).
func pickVariants(only string) ([]unitVariant, error) {
	if only == "" {
		return unitVariants, nil
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("--only: %w", err)
	}
	out := []unitVariant{unitVariants[0]}
	for _, v := range unitVariants[1:] {
		if re.MatchString(v.name) {
			out = append(out, v)
		}
	}
	return out, nil
}

const dropinName = "zz-sandbox-bench.conf"

// cmdUnitVariants starts a turn's broker units (one service start, as the
// host does, as root: the variable is systemd's work, not polkit) with the
// installed units and with one drop-in at a time, interleaved by rounds
// (daemon-reload between variants, off the clock), and reads systemd's job
// times per turn from the journal: what each part of the units' sandbox
// costs. It removes its drop-ins at the end.
func cmdUnitVariants(args []string) error {
	fs := flag.NewFlagSet("unitvariants", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	rounds := fs.Int("rounds", 8, "rounds (each runs every variant)")
	per := fs.Int("per-round", 2, "starts per variant and round")
	cred := fs.String("credential", "model", "credential name the placeholder lists")
	unitDir := fs.String("unit-dir", "/etc/systemd/system", "where drop-in directories go")
	only := fs.String("only", "", "regexp: run only the variants whose name matches (and the installed units)")
	_ = fs.Parse(args)
	if *out == "" {
		return errors.New("--out is required")
	}
	unitVariants, err := pickVariants(*only)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	c, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return fmt.Errorf("system bus: %w", err)
	}
	defer c.Close()
	path := func(v unitVariant) string { return filepath.Join(*unitDir, v.unit+".d", dropinName) }
	reload := func() error {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(cctx, "systemctl", "daemon-reload").CombinedOutput(); err != nil {
			return fmt.Errorf("daemon-reload: %v: %s", err, out)
		}
		return nil
	}
	clear := func() {
		for _, v := range unitVariants {
			if v.unit != "" {
				_ = os.Remove(path(v))
				_ = os.Remove(filepath.Dir(path(v)))
			}
		}
	}
	defer func() {
		clear()
		if err := reload(); err != nil {
			slog.Error("daemon-reload after removing the drop-ins failed", "err", err)
		}
	}()
	flow := unitFlows[1] // the host's: one service start, waited for
	res := report.UnitVariants{Rounds: *rounds, PerRound: *per, LoadStart: report.LoadAvg(), Start: time.Now().UTC()}
	turnsOf := make([][]string, len(unitVariants))
	ready := make([][]float64, len(unitVariants))
	fails := make([]int, len(unitVariants))
	var errs []string
	for r := 0; r < *rounds && ctx.Err() == nil; r++ {
		for i, v := range unitVariants {
			clear()
			if v.unit != "" {
				if err := os.MkdirAll(filepath.Dir(path(v)), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(path(v), []byte("# written by make bench (sandbox-bench unitvariants), removed at its end\n"+v.dropin), 0o644); err != nil {
					return err
				}
			}
			if err := reload(); err != nil {
				return err
			}
			for k := 0; k < *per; k++ {
				turn, d, _, err := oneUnitStartTurn(ctx, c, flow, *cred)
				if err != nil {
					fails[i]++
					if len(errs) < 5 {
						errs = append(errs, v.name+": "+err.Error())
					}
					continue
				}
				turnsOf[i] = append(turnsOf[i], turn)
				ready[i] = append(ready[i], stats.Ms(d))
			}
		}
	}
	res.End, res.LoadEnd = time.Now().UTC(), report.LoadAvg()
	res.Errors = errs
	// systemd's job times of exactly these turns, from the journal.
	jctx, jcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer jcancel()
	cmd := exec.CommandContext(jctx, "journalctl", "-o", "json", "--no-pager",
		"--since", "@"+strconv.FormatInt(res.Start.Unix()-1, 10), "-u", "sandbox-broker@*", "-u", "sandbox-credset@*")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	byTurn, perr := journal.ParseUnits(pipe)
	if err := errors.Join(perr, cmd.Wait()); err != nil {
		slog.Warn("journal of the unit variants unreadable", "err", err)
	}
	for i, v := range unitVariants {
		s := report.UnitVariant{Name: v.name, Unit: v.unit, DropIn: strings.TrimSpace(v.dropin), ReadyMs: ready[i], Failures: fails[i], JobsMs: map[string][]float64{}}
		for _, t := range turnsOf[i] {
			for k, x := range byTurn[t] {
				s.JobsMs[k] = append(s.JobsMs[k], x)
			}
		}
		s.Ready = stats.Summarize(s.ReadyMs)
		slog.Info("unit variant", "name", v.name, "ready_median_ms", s.Ready.Median, "credset_job_median_ms", stats.Quantile(s.JobsMs[journal.PhaseCredsetJob], 0.5), "failures", s.Failures)
		res.Variants = append(res.Variants, s)
	}
	return writeJSON(*out, res)
}
