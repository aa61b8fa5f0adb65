package fleetcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetconn"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// fleetChannelCmd is `fleet channel show|drop-snapshot|reset`: the repair
// of a channel's fleet state (docs/fleet.md, *Repairing a channel*). It
// talks to the fleet directly, as this box (its nkey seed and TLS key,
// which only root and the host's user read: that is what makes it admin
// only), not through the host API: the state lives in the fleet alone, and
// the repair must work while the host is down or failing on that channel.
// Each repair is logged to the journal (stderr without one).
func fleetChannelCmd(g Env) *cobra.Command {
	c := &cobra.Command{
		Use:   "channel",
		Short: "Show or repair a channel's fleet state (admin: uses this box's fleet key; each repair is logged)",
	}
	var generation string
	reset := &cobra.Command{
		Use:   "reset --generation N <channel>",
		Short: "Replace the channel's fleet state (even one that does not decode) with a fresh one at generation N: no snapshot, no last turn, no claim",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.ParseUint(generation, 10, 64)
			if generation == "" || err != nil {
				return fmt.Errorf("--generation is required: the generation to reset the channel to (a number, at least the channel's own when its state decodes)")
			}
			return withFleet(cmd, g, args[0], func(ctx context.Context, f *fleet.Fleet) error {
				return fleetChannelRun(ctx, f, "reset", args[0], n, cmd.OutOrStdout(), g.JSON(), journalLog)
			})
		},
	}
	reset.Flags().StringVar(&generation, "generation", "", "the channel's generation after the reset")
	c.AddCommand(&cobra.Command{
		Use: "show <channel>", Short: "Print the channel's fleet state as stored, and whether it decodes", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withFleet(cmd, g, args[0], func(ctx context.Context, f *fleet.Fleet) error {
				return fleetChannelRun(ctx, f, "show", args[0], 0, cmd.OutOrStdout(), g.JSON(), journalLog)
			})
		},
	}, &cobra.Command{
		Use:   "drop-snapshot <channel>",
		Short: "Drop the channel's committed workspace snapshot (one no box can restore, or a hostile box wrote); each box then starts from its own copy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withFleet(cmd, g, args[0], func(ctx context.Context, f *fleet.Fleet) error {
				return fleetChannelRun(ctx, f, "drop-snapshot", args[0], 0, cmd.OutOrStdout(), g.JSON(), journalLog)
			})
		},
	}, reset)
	return c
}

// withFleet connects to the fleet as this box (fleet.* of --config) and
// binds its resources.
func withFleet(cmd *cobra.Command, g Env, channel string, do func(context.Context, *fleet.Fleet) error) error {
	if err := ids.ValidChannel(channel); err != nil {
		return fmt.Errorf("channel %q: %w", channel, err)
	}
	cfg, err := config.Load(g.Config())
	if err != nil {
		return g.ConfigError(err)
	}
	fc := cfg.Fleet
	if !fc.Enabled {
		return fmt.Errorf("fleet.enabled is false in %s: a channel has no fleet state", g.Config())
	}
	nc, err := fleetconn.Connect(fleetconn.Options{URL: fc.URL, Name: fc.Box + "-repair", CAFile: fc.TLS.CA, CertFile: fc.TLS.Cert,
		KeyFile: fc.TLS.Key, NkeySeedFile: fc.NkeySeedFile, ConnectTimeout: g.ConnectTimeout()})
	if err != nil {
		if os.IsPermission(err) {
			return fmt.Errorf("%w: repairs are for admins (root, or the host's user), who read this box's fleet key", err)
		}
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), repairTimeout)
	defer cancel()
	f, err := fleet.Bind(ctx, nc, fc.Partitions)
	if err != nil {
		return err
	}
	return do(ctx, f)
}

// repairTimeout bounds one repair command.
const repairTimeout = 30 * time.Second

// fleetChannelRun does one of show, drop-snapshot and reset, printing the
// result and logging each repair (logf) with who ran it.
func fleetChannelRun(ctx context.Context, f *fleet.Fleet, op, channel string, generation uint64, out io.Writer, asJSON bool, logf func(msg string, attrs map[string]string)) error {
	var st fleet.ChannelState
	var err error
	switch op {
	case "show":
		v, err := f.ShowChannel(ctx, channel)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"channel": v.Channel, "key": v.Key, "revision": v.Revision, "state": v.State, "invalid": v.Invalid, "bytes": len(v.Raw)})
		}
		switch {
		case v.Revision == 0:
			fmt.Fprintf(out, "channel %s (key %s): no fleet state (it never ran a turn in the fleet)\n", channel, v.Key)
		case v.State == nil:
			// Its bytes are not printed: a box wrote them, and they may
			// hold a guest's text.
			fmt.Fprintf(out, "channel %s (key %s, revision %d): %d bytes that do not decode: %s\n  repair: sandbox-host fleet channel reset --generation N %s\n", channel, v.Key, v.Revision, len(v.Raw), v.Invalid, channel)
		default:
			s := v.State
			fmt.Fprintf(out, "channel %s (key %s, revision %d): generation %d, snapshot %q, last turn %s (seq %d), claim %q by %q\n",
				channel, v.Key, v.Revision, s.Generation, s.Workspace, s.LastTurn, s.LastSeq, s.ClaimTurn, s.Owner)
		}
		return nil
	case "drop-snapshot":
		st, err = f.DropSnapshot(ctx, channel)
	case "reset":
		st, err = f.ResetChannel(ctx, channel, generation)
	default:
		return fmt.Errorf("unknown repair %q", op)
	}
	attrs := map[string]string{"ACTION": op, "CHANNEL": channel, "UID": strconv.Itoa(os.Getuid()), "GENERATION": strconv.FormatUint(st.Generation, 10)}
	if err != nil {
		attrs["ERROR"] = err.Error()
		logf("fleet channel "+op+" refused", attrs)
		return err
	}
	logf("fleet channel "+op+" done", attrs)
	fmt.Fprintf(out, "channel %s: %s done: generation %d, snapshot %q\n", channel, op, st.Generation, st.Workspace)
	return nil
}

// journalLog records a repair in the journal (SYSLOG_IDENTIFIER
// sandbox-host), or on stderr where there is none.
func journalLog(msg string, attrs map[string]string) {
	if journal.Enabled() {
		attrs["SYSLOG_IDENTIFIER"] = "sandbox-host"
		if journal.Send(msg, journal.PriNotice, attrs) == nil {
			return
		}
	}
	fmt.Fprintf(os.Stderr, "sandbox-host: %s %v\n", msg, attrs)
}
