package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
)

// maxTaskFileBytes bounds --task-file: the host's own bound is 30,000
// characters at most (delegation.maxTaskChars), 4 bytes each.
const maxTaskFileBytes = 4 * 30000

func delegateCmd(g *globals) *cobra.Command {
	var (
		title, task, taskFile string
		author                apiwire.Speaker
		wait                  bool
	)
	cmd := &cobra.Command{
		Use:   "delegate <channel> --title T (--task T | --task-file F) --author-id A [--wait]",
		Short: "Delegate a bounded research task in a channel; prints the job id (or, with --wait, its report)",
		Long: `Delegate a research task: the host runs one sealed research turn of the channel whose only tools are
the configured fetch (and search) tools, and keeps its report for the channel's frontend
(sandbox-host jobs show ID, sandbox-host jobs follow CHANNEL). With --wait the command polls the job
until it finished and prints its report; a failed or cancelled job prints its reason and exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (task == "") == (taskFile == "") {
				return errors.New("give the task with exactly one of --task or --task-file")
			}
			if taskFile != "" {
				f, err := os.Open(taskFile)
				if err != nil {
					return err
				}
				data, err := io.ReadAll(io.LimitReader(f, maxTaskFileBytes+1))
				f.Close()
				if err != nil {
					return err
				}
				if len(data) > maxTaskFileBytes {
					return fmt.Errorf("--task-file %s is over %d bytes", taskFile, maxTaskFileBytes)
				}
				task = string(data)
			}
			c := g.client()
			st, err := c.Delegate(cmd.Context(), args[0], title, task, author)
			if err != nil {
				return err
			}
			if !wait {
				if g.json {
					return printJSON(cmd, st)
				}
				fmt.Fprintln(cmd.OutOrStdout(), st.ID)
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%sjob %s queued; waiting for its report\n", prefix, st.ID)
			final, err := c.WaitJob(cmd.Context(), st.ID, time.Second)
			if err != nil {
				return err
			}
			return printJob(cmd, g, final)
		},
	}
	f := cmd.Flags()
	f.StringVar(&title, "title", "", "short title of the task (required)")
	f.StringVar(&task, "task", "", "the task")
	f.StringVar(&taskFile, "task-file", "", "read the task from this file")
	f.StringVar(&author.ID, "author-id", "", "id of the guest delegating (required; the research turn's speaker)")
	f.StringVar(&author.Name, "author-name", "", "display name of that guest")
	f.StringVar(&author.PrincipalID, "principal", "", "principal id the author was admitted as (selects the credential; never reaches the worker)")
	f.BoolVar(&wait, "wait", false, "wait for the job to finish and print its report")
	cmd.MarkFlagRequired("title")
	cmd.MarkFlagRequired("author-id")
	return cmd
}

// printJob prints a finished job: its report on stdout, or its reason as
// the command's error.
func printJob(cmd *cobra.Command, g *globals, st delegation.Status) error {
	if g.json {
		if err := printJSON(cmd, st); err != nil {
			return err
		}
		if st.State != delegation.StateDone {
			return &exitError{code: 1, err: errSilent}
		}
		return nil
	}
	switch st.State {
	case delegation.StateDone:
		fmt.Fprintln(cmd.OutOrStdout(), st.Report)
		if st.ReportTruncated {
			fmt.Fprintf(cmd.ErrOrStderr(), "%sjob %s: the report was cut to the configured bound\n", prefix, st.ID)
		}
		return nil
	case delegation.StateFailed, delegation.StateCancelled:
		return fmt.Errorf("job %s %s: %s", st.ID, st.State, st.Error)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "job %s is %s\n", st.ID, st.State)
	return nil
}

func jobsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Delegated jobs: show <id>, follow <channel>",
	}
	show := &cobra.Command{
		Use:   "show <id>",
		Short: "Show a job: its report once done, its reason once failed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.client().Job(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJob(cmd, g, st)
		},
	}
	var count int
	follow := &cobra.Command{
		Use:   "follow <channel>",
		Short: "Print the channel's finished jobs as they finish (those not yet delivered to you first)",
		Long: `Print the channel's finished jobs: first those that finished before and were not yet delivered to
your uid, then each as it finishes. With --json each job is one JSON line (NDJSON). Ends after --count
jobs (0: never), on interrupt, or with an error when the host goes silent for a minute.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stop := errors.New("count reached")
			n := 0
			err := g.client().FollowJobs(cmd.Context(), args[0], 0, func(st delegation.Status) error {
				if g.json {
					if err := jsonLine(cmd.OutOrStdout(), st); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "job %s %s: %s\n", st.ID, st.State, st.Title)
					if st.State == delegation.StateDone {
						fmt.Fprintln(cmd.OutOrStdout(), st.Report)
					} else {
						fmt.Fprintln(cmd.OutOrStdout(), st.Error)
					}
				}
				if n++; count > 0 && n >= count {
					return stop
				}
				return nil
			})
			if errors.Is(err, stop) {
				return nil
			}
			return err
		},
	}
	follow.Flags().IntVar(&count, "count", 0, "stop after this many jobs (0: follow until interrupted)")
	cmd.AddCommand(show, follow)
	return cmd
}

// jsonLine writes v as one compact JSON line (NDJSON).
func jsonLine(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}
