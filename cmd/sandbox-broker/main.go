// Command sandbox-broker is one turn's broker: `sandbox-broker serve --turn
// <id>` takes the socket-activated listener (or --listen PATH), loads that
// turn's policy and serves until the policy deadline or SIGTERM. All
// behaviour lives in package broker; this file only wires flags.
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

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/broker"
	"github.com/roundtable-sandbox/sandbox/pkg/credset"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/mcp"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// The real upstream MCP client satisfies the broker's narrow interface.
var _ broker.MCPUpstream = (*mcp.Client)(nil)

func main() {
	if err := newRoot().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "sandbox-broker",
		Short:         "Per-turn broker of roundtable-sandbox: the sealed container's only exit",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServe(), newCredset(), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version.Version) },
	})
	return root
}

func newServe() *cobra.Command {
	var o broker.RunOptions
	var logFormat string
	cmd := &cobra.Command{
		Use:   "serve --turn ID",
		Short: "Serve one turn until its policy deadline",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(logFormat)
			err := serve(o, log)
			if err != nil {
				log.Error("broker failed", "reason", err.Error())
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.TurnID, "turn", "", "turn id (32 lowercase hex digits; the unit instance name)")
	f.StringVar(&o.PolicyDir, "policy-dir", layout.PolicyDir, "directory holding <turn>.json")
	f.StringVar(&o.CredentialsDir, "credentials-dir", os.Getenv("CREDENTIALS_DIRECTORY"), "directory of credential files (default $CREDENTIALS_DIRECTORY)")
	f.StringVar(&o.CredentialPrefix, "credential-prefix", layout.CredentialPrefix, "file-name prefix of every credential (systemd's LoadCredential=<ID>:<dir> names files <ID>_<name>)")
	f.StringVar(&o.ListenPath, "listen", "", "Unix socket path to listen on when no socket is passed by systemd")
	f.StringVar(&logFormat, "log-format", "text", "log format: text (journald-friendly) or json")
	_ = cmd.MarkFlagRequired("turn")
	return cmd
}

// newCredset is sandbox-credset@<turn>.service's command: copy exactly the
// credentials the turn's policy names into the unit's runtime directory.
func newCredset() *cobra.Command {
	var turn, policyDir, from, out string
	cmd := &cobra.Command{
		Use:   "credset --turn ID",
		Short: "Copy the credentials one turn's policy names (run by sandbox-credset@<turn>.service)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger("text")
			if out == "" {
				return errors.New("no output directory: set --out or run under RuntimeDirectory=")
			}
			r, err := credset.Copy(turn, policyDir, from, out)
			if err != nil {
				log.Error("credential set failed", "turn", turn, "reason", err.Error())
				return err
			}
			log.Info("credential set", "turn", turn, "copied", r.Copied, "missing", r.Missing, "skipped", r.Skipped, "unreadable", r.Unreadable, "standby_placeholder", r.Pending)
			if len(r.Unreadable) > 0 {
				log.Error("credential files the copier may not read: their calls fail closed", "turn", turn, "credentials", r.Unreadable,
					"fix", "chown root:"+layout.CredsetUser+" and chmod 0640 each file in "+from+" (docs/operating.md, Credentials; sandbox-host doctor checks)")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&turn, "turn", "", "turn id (the unit instance name)")
	f.StringVar(&policyDir, "policy-dir", layout.PolicyDir, "directory holding <turn>.json")
	f.StringVar(&from, "from", layout.CredentialsDir, "the credentials directory")
	f.StringVar(&out, "out", os.Getenv("RUNTIME_DIRECTORY"), "output directory (default $RUNTIME_DIRECTORY)")
	_ = cmd.MarkFlagRequired("turn")
	return cmd
}

func serve(o broker.RunOptions, log *slog.Logger) error {
	// activation.Listeners unsets LISTEN_* on its first call: call it once.
	lns, err := activation.Listeners()
	if err != nil {
		return fmt.Errorf("socket activation: %w", err)
	}
	switch {
	case len(lns) == 1 && lns[0] != nil:
		o.Listener = lns[0]
	case len(lns) == 0:
		// Fallback: --listen (development and tests).
	default:
		for _, l := range lns {
			if l != nil {
				l.Close()
			}
		}
		return errors.New("socket activation: exactly one stream socket is required")
	}
	if o.Listener != nil && o.ListenPath != "" {
		log.Warn("--listen ignored: a socket was passed by systemd")
	}
	o.Logger = log
	o.Notify = func(state string) { _, _ = daemon.SdNotify(false, state) }
	o.NewMCP = func(maxResponseBytes int64, timeout time.Duration, log *slog.Logger) broker.MCPUpstream {
		return mcp.NewClient(mcp.Options{MaxResponseBytes: maxResponseBytes, Timeout: timeout, Logger: log})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return broker.Run(ctx, o)
}

func newLogger(format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	var h slog.Handler
	if format == "json" {
		h = slog.NewJSONHandler(os.Stderr, opts)
	} else {
		// journald adds its own timestamp.
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	return slog.New(h)
}
