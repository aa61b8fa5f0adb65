package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
)

func precheckCmd(g *globals) *cobra.Command {
	var (
		req        precheck.Request
		scriptFile string
		grants     []string
	)
	cmd := &cobra.Command{
		Use:   "precheck --channel C --script FILE [--grant server:tool]... [--fired-at RFC3339] [--time-zone Z] [--target T] [--schedule S]",
		Short: "Run a schedule's precheck script once in a sealed container and print its answer",
		Long: `Run a precheck script (export default async ({ mcp, firedAt, timeZone, today, schedule }) => result)
once in a sealed container whose broker reaches only the granted MCP tools (each must be allowed for the
channel by prechecks.grants). Prints "wake" and the context, "no wake" and the note, or the script's
error; exits 0 for every answer the script gave (an error included, which wakes the scheduled turn)
and 1 when the host refused or could not run it. --script - reads the script from stdin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var in io.Reader
			if scriptFile == "-" {
				in = cmd.InOrStdin()
			} else {
				f, err := os.Open(scriptFile)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			data, err := io.ReadAll(io.LimitReader(in, precheck.MaxScriptBytes+1))
			if err != nil {
				return err
			}
			if len(data) > precheck.MaxScriptBytes {
				return fmt.Errorf("--script %s is over %d bytes", scriptFile, precheck.MaxScriptBytes)
			}
			req.Script = string(data)
			for _, gr := range grants {
				server, tool, ok := strings.Cut(gr, ":")
				if !ok || server == "" || tool == "" {
					return fmt.Errorf("--grant %q: write it as server:tool", gr)
				}
				req.Grants = append(req.Grants, precheck.Grant{Server: server, Tool: tool})
			}
			a, err := g.client().Precheck(cmd.Context(), req)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(cmd, a)
			}
			out := cmd.OutOrStdout()
			switch {
			case a.Error != "":
				fmt.Fprintln(out, "error (wakes the turn): "+a.Error)
			case a.Wake == nil:
				return errors.New("the host's answer has neither wake nor error")
			case *a.Wake:
				fmt.Fprintln(out, "wake")
				fmt.Fprintln(out, a.Context)
			default:
				fmt.Fprintln(out, "no wake")
				if a.Note != "" {
					fmt.Fprintln(out, a.Note)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Channel, "channel", "", "the schedule's channel key (required)")
	f.StringVar(&scriptFile, "script", "", "file holding the script, - for stdin (required)")
	f.StringArrayVar(&grants, "grant", nil, "an MCP tool approved with the script, server:tool (repeatable)")
	f.StringVar(&req.FiredAt, "fired-at", "", "the firing time, RFC 3339 (default: now)")
	f.StringVar(&req.TimeZone, "time-zone", "", "IANA time zone of today (default: the host's timeZone)")
	f.StringVar(&req.Target, "target", "", "the schedule's target")
	f.StringVar(&req.Schedule, "schedule", "", "the schedule's text, handed to the script")
	cmd.MarkFlagRequired("channel")
	cmd.MarkFlagRequired("script")
	return cmd
}
