// Package cli is the sandbox-host command line: `serve` (the daemon, wired to
// Docker, systemd D-Bus and the startup reaper), the API client commands an
// operator or script uses (turn, channel ...), `doctor` and `version`.
// Guarantee: every command exits non-zero when it did not succeed, and
// --json output is one JSON document on stdout.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/cli/fleetcmd"
	"github.com/roundtable-sandbox/sandbox/pkg/cli/sessioncmd"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// Inputs are what main hands over: the systemd socket-activation listeners
// (activation.Listeners() is called once, in main) and the standard streams.
type Inputs struct {
	Listeners    []net.Listener
	ListenersErr error
	Stdin        io.Reader
	Stdout       io.Writer
	Stderr       io.Writer
}

type globals struct {
	socket, config string
	json           bool
	timeouts       client.Options
	in             Inputs
}

// client returns an API client with the command line's bounds.
func (g *globals) client() *client.Client { return client.NewWithOptions(g.socket, g.timeouts) }

// errSilent: the command already reported its failure.
var errSilent = errors.New("failed")

// ExitConfig is serve's exit status when the configuration cannot be loaded
// (sysexits' EX_CONFIG). sandbox-host.service lists it in
// RestartPreventExitStatus=: restarting cannot fix a file.
const ExitConfig = 78

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// prefix starts every error line the command prints.
const prefix = "sandbox-host: "

// Main runs the command line and returns the exit status.
func Main(ctx context.Context, args []string, in Inputs) int {
	if in.Stdin == nil {
		in.Stdin = os.Stdin
	}
	if in.Stdout == nil {
		in.Stdout = os.Stdout
	}
	if in.Stderr == nil {
		in.Stderr = os.Stderr
	}
	g := &globals{in: in}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(in.Stdin)
	root.SetOut(in.Stdout)
	root.SetErr(in.Stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errSilent) {
			// Errors of pkg/client already carry the prefix: print it once.
			msg := prefix + strings.TrimPrefix(err.Error(), prefix)
			if g.json {
				json.NewEncoder(in.Stdout).Encode(map[string]any{"ok": false, "error": msg})
			} else {
				fmt.Fprintln(in.Stderr, msg)
			}
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "sandbox-host",
		Short:         "roundtable-sandbox host daemon and its control commands",
		Long:          "sandbox-host runs sealed guest turns, rich channels, code runs, prechecks and delegated jobs: each in a new, networkless Docker container whose only way out is a broker unit of its own.\nRun `sandbox-host doctor` first after installing or changing the configuration.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.socket, "socket", layout.HostSocket, "host API socket")
	pf.StringVar(&g.config, "config", layout.ConfigFile, "configuration file")
	pf.BoolVar(&g.json, "json", false, "print one JSON document (for scripts)")
	pf.DurationVar(&g.timeouts.ConnectTimeout, "connect-timeout", client.DefaultConnectTimeout, "give up connecting to the host socket after this long")
	pf.DurationVar(&g.timeouts.Timeout, "timeout", client.DefaultTimeout, "give up waiting for the host's answer to a status or control command after this long")
	pf.DurationVar(&g.timeouts.TurnTimeout, "turn-timeout", client.DefaultTurnTimeout, "give up waiting for a turn's reply (queueing included) after this long")
	root.AddCommand(serveCmd(g), turnCmd(g), channelCmd(g), runCmd(g), doctorCmd(g), versionCmd(g))
	root.AddCommand(toolboxCmd(g))
	root.AddCommand(delegateCmd(g), jobsCmd(g))
	root.AddCommand(precheckCmd(g))
	root.AddCommand(mcpCmd(g))
	root.AddCommand(fleetcmd.Command(fleetcmd.Env{
		Config:         func() string { return g.config },
		JSON:           func() bool { return g.json },
		ConnectTimeout: func() time.Duration { return g.timeouts.ConnectTimeout },
		ConfigError:    func(err error) error { return &exitError{code: ExitConfig, err: err} },
	}))
	root.AddCommand(sessioncmd.Command(sessioncmd.Env{
		Client: g.client,
		JSON:   func() bool { return g.json },
		Exit: func(code int, err error) error {
			if err == nil {
				err = errSilent
			}
			return &exitError{code: code, err: err}
		},
	}))
	return root
}

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.json {
				return printJSON(cmd, map[string]string{"version": version.Version})
			}
			fmt.Fprintln(cmd.OutOrStdout(), version.Version)
			return nil
		},
	}
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Tree is the command tree as `sandbox-host --help` shows it (cobra adds
// help and completion when it runs), for documentation checks: docs/api.md's
// command summary is compared with it (test/newcomer).
func Tree() *cobra.Command { return newRoot(&globals{}) }
