package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

func turnCmd(g *globals) *cobra.Command {
	var sp apiwire.Speaker
	var text string
	var attach []string
	var filesDir string
	var viaFleet bool
	cmd := &cobra.Command{
		Use:   "turn <channel>",
		Short: "Run one guest message in a channel (text from --text or stdin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("text") {
				data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 4*protocol.MaxTextChars+1))
				if err != nil {
					return err
				}
				text = strings.TrimSuffix(string(data), "\n")
			}
			atts, err := parseAttaches(attach)
			if err != nil {
				return err
			}
			var reply apiwire.Reply
			if viaFleet {
				if len(atts) > 0 || filesDir != "" {
					return errors.New("--fleet runs sealed turns only: --attach and --files-dir need a rich channel, which runs on its box (use host.sock)")
				}
				reply, err = fleetTurn(cmd, g, args[0], sp, text)
			} else {
				reply, err = g.client().RunTurnAttachments(cmd.Context(), args[0], sp, text, atts)
			}
			if err != nil {
				return err
			}
			if g.json {
				if err := printJSON(cmd, reply); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), reply.Text)
			}
			if err := saveReplyFiles(cmd, filesDir, reply.Files); err != nil {
				return err
			}
			if g.json {
				return nil
			}
			if !reply.OK {
				return fmt.Errorf("the worker reported failure (turn %s)", reply.TurnID)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sp.ID, "speaker-id", "", "speaker id (required)")
	f.StringVar(&sp.Name, "speaker-name", "", "speaker display name")
	f.StringVar(&sp.PrincipalID, "principal", "", "principal id the speaker was admitted as (never reaches the worker)")
	f.StringVar(&text, "text", "", "message text (default: read stdin)")
	f.StringArrayVar(&attach, "attach", nil, "attach URL[,name[,type]] (rich channels; repeat for up to 10)")
	f.BoolVar(&viaFleet, "fleet", false, "send the turn through the fleet (fleet.* of --config) instead of this box's host.sock, as a frontend on no box does")
	f.StringVar(&filesDir, "files-dir", "", "write the reply's files into this existing directory (new files only; never over a file or through a link)")
	cmd.MarkFlagRequired("speaker-id")
	return cmd
}

func channelCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "channel",
		Short: "Show and control channels: on|off|status|fresh|cancel <channel>, list",
	}
	one := func(use, short string, run func(c *client.Client, cmd *cobra.Command, ch string) (any, error)) *cobra.Command {
		return &cobra.Command{
			Use: use + " <channel>", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				out, err := run(g.client(), cmd, args[0])
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(cmd, out)
				}
				printHuman(cmd, out)
				return nil
			},
		}
	}
	var rich bool
	var profile string
	on := one("on", "Put a channel in sandbox mode, or with --rich --profile P in rich mode (admins)", func(c *client.Client, cmd *cobra.Command, ch string) (any, error) {
		switch {
		case rich && profile == "":
			return nil, errors.New("--rich needs --profile")
		case !rich && profile != "":
			return nil, errors.New("--profile is for --rich")
		case rich:
			return c.SetRich(cmd.Context(), ch, profile)
		}
		return c.SetMode(cmd.Context(), ch, "on")
	})
	on.Flags().BoolVar(&rich, "rich", false, "rich mode: the channel's turns run on its long-lived rich worker")
	on.Flags().StringVar(&profile, "profile", "", "the configured profile of a rich channel")
	cmd.AddCommand(
		on,
		one("off", "Take a channel out of sandbox mode; memory is kept (admins)", func(c *client.Client, cmd *cobra.Command, ch string) (any, error) {
			return c.SetMode(cmd.Context(), ch, "off")
		}),
		one("status", "Show a channel's mode, tag, queue and running turn", func(c *client.Client, cmd *cobra.Command, ch string) (any, error) {
			return c.Channel(cmd.Context(), ch)
		}),
		one("fresh", "Start the channel's next turn without history; memory is kept (admins)", func(c *client.Client, cmd *cobra.Command, ch string) (any, error) {
			return c.Fresh(cmd.Context(), ch)
		}),
		one("cancel", "Cancel the channel's running turn (admins)", func(c *client.Client, cmd *cobra.Command, ch string) (any, error) {
			return c.Cancel(cmd.Context(), ch)
		}),
		&cobra.Command{
			Use: "list", Short: "List known channels", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				list, err := g.client().Channels(cmd.Context())
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(cmd, map[string]any{"channels": list})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "MODE\tQUEUED\tRUNNING\tFRESH\tSTANDBY\tTAG\tCHANNEL")
				for _, c := range list {
					mode := c.Mode
					if c.Profile != "" {
						mode += ":" + c.Profile
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%s\t%s\t%q\n", mode, c.Queued, dash(c.RunningTurn), c.PendingFresh, dash(c.Standby), c.Tag, c.Channel)
				}
				return tw.Flush()
			},
		},
	)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printHuman(cmd *cobra.Command, v any) {
	w := cmd.OutOrStdout()
	switch x := v.(type) {
	case apiwire.Channel:
		fmt.Fprintf(w, "channel %q (tag %s): mode %s, %d queued, running %s, fresh start pending: %v", x.Channel, x.Tag, x.Mode, x.Queued, dash(x.RunningTurn), x.PendingFresh)
		if x.Standby != "" {
			fmt.Fprintf(w, ", standby %s", x.Standby)
			if x.StandbyExpiresUnix > 0 {
				fmt.Fprintf(w, " (expires %s)", time.Unix(x.StandbyExpiresUnix, 0).UTC().Format(time.RFC3339))
			}
		}
		if x.Profile != "" {
			fmt.Fprintf(w, ", profile %s", x.Profile)
		}
		if a := x.Admission; a != nil {
			how := "queue.globalConcurrency"
			if a.Derived {
				how = "derived from this machine"
			}
			fmt.Fprintf(w, "; host: %d running, %d waiting, global concurrency %d (%s), queue wait at most %d s",
				a.Running, a.Waiting, a.GlobalConcurrency, how, a.MaxWaitSeconds)
			if a.StartConcurrency > 0 {
				how = "queue.startConcurrency"
				if a.StartDerived {
					how = "derived from this machine"
				}
				fmt.Fprintf(w, "; %d starting, %d waiting to start, at most %d at once (%s)", a.Starting, a.StartWaiting, a.StartConcurrency, how)
			}
		}
		if r := x.Rich; r != nil {
			fmt.Fprintf(w, ", session %s", r.State)
			if r.Session != "" {
				fmt.Fprintf(w, " (%s, container %s, %d turns", r.Session, r.Container, r.Turns)
				if r.IdleStopUnix > 0 {
					fmt.Fprintf(w, ", idle stop %s", time.Unix(r.IdleStopUnix, 0).UTC().Format(time.RFC3339))
				}
				fmt.Fprint(w, ")")
			}
		}
		fmt.Fprintln(w)
	case apiwire.Cancel:
		if x.Cancelled {
			fmt.Fprintf(w, "cancelled turn %s in channel %q\n", x.TurnID, x.Channel)
		} else {
			fmt.Fprintf(w, "channel %q has no running turn\n", x.Channel)
		}
	default:
		fmt.Fprintf(w, "%+v\n", v)
	}
}

// saveReplyFiles writes a rich reply's files under dir, or says on stderr
// that they were not written.
func saveReplyFiles(cmd *cobra.Command, dir string, files []richproto.File) error {
	if len(files) == 0 {
		return nil
	}
	if dir == "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "sandbox-host: %d reply files not written (use --files-dir DIR)\n", len(files))
		return nil
	}
	written, err := client.WriteReplyFiles(dir, files)
	for i, p := range written {
		// Quoted: a name is checked, the directory is the user's; neither
		// reaches the terminal raw.
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %q (%d bytes)\n", p, len(files[i].Data))
	}
	if err != nil {
		return fmt.Errorf("reply files: %w", err)
	}
	return nil
}
