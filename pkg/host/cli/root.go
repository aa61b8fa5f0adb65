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

	"github.com/spf13/cobra"

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
	in             Inputs
}

// errSilent: the command already reported its failure.
var errSilent = errors.New("failed")

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
			if g.json {
				json.NewEncoder(in.Stdout).Encode(map[string]any{"ok": false, "error": err.Error()})
			} else {
				fmt.Fprintln(in.Stderr, "sandbox-host:", err)
			}
		}
		return 1
	}
	return 0
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "sandbox-host",
		Short:         "roundtable-sandbox host daemon and its control commands",
		Long:          "sandbox-host runs sealed guest turns: each in a new, networkless Docker container whose only way out is a per-turn broker unit.\nRun `sandbox-host doctor` first after installing or changing the configuration.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.socket, "socket", layout.HostSocket, "host API socket")
	pf.StringVar(&g.config, "config", layout.ConfigFile, "configuration file")
	pf.BoolVar(&g.json, "json", false, "print one JSON document (for scripts)")
	root.AddCommand(serveCmd(g), turnCmd(g), channelCmd(g), doctorCmd(g), versionCmd(g))
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
