// Command sandbox-reaper is the oneshot run by sandbox-reaper.timer: it
// removes this installation's orphaned containers, broker units, turn
// directories and policy files (package reaper) and logs one summary line.
// It exits non-zero only when something could not be removed (or the
// configuration is bad). This file only wires flags, config and clients.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/reaper"
	"github.com/roundtable-sandbox/sandbox/pkg/unitctl"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// passTimeout bounds one whole pass, so a wedged daemon cannot hold the
// timer's service forever.
const passTimeout = 5 * time.Minute

type options struct {
	configPath   string
	installation string
	runRoot      string
	policyDir    string
	grace        time.Duration
	dockerHost   string
	hostSocket   string
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := newRoot(log).Execute(); err != nil {
		// An incomplete reap was already reported by its summary line.
		if !errors.Is(err, reaper.ErrIncomplete) {
			log.Error("sandbox-reaper failed", "err", err)
		}
		os.Exit(1)
	}
}

func newRoot(log *slog.Logger) *cobra.Command {
	o := options{}
	cmd := &cobra.Command{
		Use:   "sandbox-reaper",
		Short: "Remove orphaned roundtable-sandbox containers, broker units, turn directories and policy files",
		Long: "sandbox-reaper removes what is provably not live: objects whose turn deadline plus the grace has passed, " +
			"or (when sandbox-host runs) objects of turns the host does not list that existed before the pass began.\n" +
			"Values come from the config file when it exists; flags given on the command line override it.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.merge(cmd); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, passTimeout)
			defer cancel()
			return run(ctx, log, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.configPath, "config", layout.ConfigFile, "config file (used when it exists; an explicit path must exist)")
	f.StringVar(&o.installation, "installation", "default", "installation id (config: installation)")
	f.StringVar(&o.runRoot, "run-root", layout.RunRoot, "turn directories (config: runRoot)")
	f.StringVar(&o.policyDir, "policy-dir", layout.PolicyDir, "policy files (config: policyDir)")
	f.DurationVar(&o.grace, "grace", 60*time.Second, "time after a turn's deadline before its objects are removed (config: reaper.graceSeconds)")
	f.StringVar(&o.dockerHost, "docker-host", "", "Docker daemon, unix:///path (default DOCKER_HOST or the default socket; config: dockerHost)")
	f.StringVar(&o.hostSocket, "host-socket", layout.HostSocket, "host API socket, asked for live turns only while sandbox-host.service is active")
	cmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version.Version) },
	})
	return cmd
}

// merge fills options from the config file, then lets explicit flags win.
func (o *options) merge(cmd *cobra.Command) error {
	f := cmd.Flags()
	if _, err := os.Stat(o.configPath); err != nil {
		if f.Changed("config") || !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("config %s: %w", o.configPath, err)
		}
		return nil // no config installed: flag defaults
	}
	c, err := config.Load(o.configPath)
	if err != nil {
		return err
	}
	if !f.Changed("installation") {
		o.installation = c.Installation
	}
	if !f.Changed("run-root") {
		o.runRoot = c.RunRoot
	}
	if !f.Changed("policy-dir") {
		o.policyDir = c.PolicyDir
	}
	if !f.Changed("grace") {
		o.grace = time.Duration(c.Reaper.GraceSeconds) * time.Second
	}
	if !f.Changed("docker-host") {
		o.dockerHost = c.DockerHost
	}
	return nil
}

// unavailableUnits stands in when the system bus cannot be reached: the unit
// listing then counts as a failure and the rest of the pass still runs.
type unavailableUnits struct{ err error }

func (u unavailableUnits) ListBrokers(context.Context) ([]string, error) { return nil, u.err }
func (u unavailableUnits) StopBroker(context.Context, string) error      { return u.err }
func (u unavailableUnits) HostActive(context.Context) (bool, error)      { return false, u.err }

func run(ctx context.Context, log *slog.Logger, o options) error {
	docker, err := container.New(o.dockerHost)
	if err != nil {
		return err
	}
	defer docker.Close()

	var units interface {
		reaper.Units
		reaper.HostState
	}
	mgr, err := unitctl.Connect(ctx)
	if err != nil {
		log.Warn("system bus unavailable: broker units are not reaped and the host is not asked", "err", err)
		units = unavailableUnits{err}
	} else {
		defer mgr.Close()
		units = mgr
	}

	r := &reaper.Reaper{
		Installation: o.installation,
		RunRoot:      o.runRoot,
		PolicyDir:    o.policyDir,
		Grace:        o.grace,
		Containers:   docker,
		Units:        units,
		Active:       reaper.HostTurns(units, o.hostSocket),
		Log:          log,
	}
	sum, err := r.Reap(ctx)
	if err != nil && !errors.Is(err, reaper.ErrIncomplete) {
		return err
	}
	level := slog.LevelInfo
	if sum.Failed > 0 {
		level = slog.LevelError
	}
	log.Log(ctx, level, "reap finished", "installation", o.installation, "summary", sum)
	return err
}
