package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/cli/sessioncmd"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// Exit statuses of `sandbox-host run` besides the command's own.
const (
	exitRunTimeout = 124 // as timeout(1)
	exitRunOther   = 125 // denied, cancelled or a system error: the command's status is unknown
)

func runCmd(g *globals) *cobra.Command {
	var (
		p       runs.Params
		out     string
		detach  bool
		timeout int
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- EXECUTABLE [ARGS...]",
		Short: "Run code in a fresh toolbox container; prints its output as it comes and exits with its status",
		Long: `Run code in a fresh, offline toolbox container that is removed afterwards.
Argv mode: sandbox-host run -- python3 -c 'print(1)'
Shell mode: sandbox-host run --command 'pytest -q && ls /output'
The project (--project, as the operator declared it in runs.projects) is read-only at /workspace;
/output is writable and --artifact PATH exports a file from it (written under --out DIR).
--network asks for network for this run only: it waits until an admin approves it
(sandbox-host run approve ID). --credential NAME (with --network) also asks for one of the
operator's credentialed destinations (egress.credentials): the broker adds its credential to
the run's requests to that host, the run never holds it. Exit status: the command's; 124 on timeout; 125 when the run
was denied, cancelled or could not be carried out.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if p.Command == "" {
				if len(args) == 0 {
					return errors.New("give the command after -- (argv mode) or with --command (shell mode)")
				}
				p.Executable, p.Args = args[0], args[1:]
			} else if len(args) > 0 {
				return errors.New("give either --command or a command after --, not both")
			}
			p.TimeoutSeconds = timeout
			if out != "" {
				if st, err := os.Stat(out); err != nil || !st.IsDir() {
					return fmt.Errorf("--out %s must be an existing directory", out)
				}
			}
			return runAndFollow(cmd, g, p, out, detach)
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Project, "project", "", "project to mount read-only at /workspace (runs.projects)")
	f.StringVarP(&p.Command, "command", "c", "", "shell command (shell mode) instead of an argv after --")
	f.BoolVar(&p.Network, "network", false, "ask for network for this run (an admin must approve it)")
	f.StringArrayVar(&p.Credentials, "credential", nil, "with --network: a credentialed destination (egress.credentials) the broker adds to the run's requests (repeatable; the approval shows it)")
	f.IntVar(&timeout, "timeout", runs.DefaultTimeoutSeconds, "kill the run after this many seconds (1 to 3600)")
	f.StringArrayVar(&p.Artifacts, "artifact", nil, "file under /output to export (repeatable)")
	f.StringArrayVar(&p.Setup, "setup", nil, "shell command run as root before the command, e.g. package installation (repeatable)")
	f.StringVar(&out, "out", "", "directory to write exported artifacts into (they are never overwritten)")
	f.BoolVar(&detach, "detach", false, "print the run's id and return at once")
	cmd.AddCommand(runAdminCmds(g)...)
	return cmd
}

// runAndFollow starts the run and prints its events; an interrupt cancels
// the run before the command exits.
func runAndFollow(cmd *cobra.Command, g *globals, p runs.Params, out string, detach bool) error {
	c := g.client()
	ctx := cmd.Context()
	st, err := c.StartRun(ctx, p)
	if err != nil {
		return err
	}
	if detach {
		if g.json {
			return printJSON(cmd, st)
		}
		fmt.Fprintln(cmd.OutOrStdout(), st.ID)
		return nil
	}
	stderr := cmd.ErrOrStderr()
	if st.State == runs.StateAwaitingApproval {
		what := "network"
		if len(st.Credentials) > 0 {
			what = "network with the credentials " + strings.Join(credentialsShown(st), ", ")
		}
		fmt.Fprintf(stderr, "%srun %s awaits an admin's approval of %s: sandbox-host run approve %s (or deny)\n", prefix, st.ID, what, st.ID)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	followCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		select {
		case <-sigs:
			stop(errors.New("interrupted"))
		case <-followCtx.Done():
		}
	}()
	var stdout io.Writer = cmd.OutOrStdout()
	if g.json {
		stdout = io.Discard // the final document carries the output
	}
	final, err := c.RunEvents(followCtx, st.ID, func(ev runs.Event) error {
		if ev.Type != runs.EventOutput {
			return nil
		}
		if ev.Stream == runs.StreamStderr {
			_, err := stderr.Write(ev.Data)
			return err
		}
		_, err := stdout.Write(ev.Data)
		return err
	})
	if err != nil {
		if followCtx.Err() != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if _, cerr := c.CancelRun(cctx, st.ID); cerr != nil && !errors.Is(cerr, client.ErrModeOff) {
				fmt.Fprintf(stderr, "%scancel of run %s failed: %v\n", prefix, st.ID, cerr)
			} else {
				fmt.Fprintf(stderr, "%srun %s cancelled\n", prefix, st.ID)
			}
			return &exitError{code: 130, err: errSilent}
		}
		return err
	}
	written, werr := writeArtifacts(out, final.Artifacts)
	if g.json {
		if err := printJSON(cmd, final); err != nil {
			return err
		}
	} else {
		// Paths are the run's choice: quoted, so no escape sequence or
		// direction override of theirs reaches the terminal raw.
		for _, a := range final.Artifacts {
			switch {
			case a.Error != "":
				fmt.Fprintf(stderr, "%sartifact %q: %q\n", prefix, a.Path, a.Error)
			case out == "":
				fmt.Fprintf(stderr, "%sartifact %q: %d bytes (use --out DIR to write it)\n", prefix, a.Path, a.Size)
			}
		}
		for _, w := range written {
			fmt.Fprintf(stderr, "%swrote %q\n", prefix, w)
		}
		// Last, after the output: the printed output is not all of it.
		if note := final.CutNote(); note != "" {
			fmt.Fprintf(stderr, "%srun %s: %s (runs.maxOutputBytes)\n", prefix, final.ID, note)
		}
	}
	if werr != nil {
		return werr
	}
	err = runExit(final)
	var ee *exitError
	if g.json && errors.As(err, &ee) {
		// The document printed says everything: one JSON document only.
		return &exitError{code: ee.code, err: errSilent}
	}
	return err
}

// runExit turns a finished run into the command's exit status.
func runExit(st runs.Status) error {
	switch st.Result {
	case runs.ResultOK:
		return nil
	case runs.ResultFailed:
		code := 1
		if st.ExitCode != nil {
			code = *st.ExitCode
		}
		what := "the command"
		if st.FailedSetup > 0 {
			what = fmt.Sprintf("setup command %d", st.FailedSetup)
		}
		return &exitError{code: code, err: fmt.Errorf("run %s: %s exited with status %d", st.ID, what, code)}
	case runs.ResultTimeout:
		return &exitError{code: exitRunTimeout, err: fmt.Errorf("run %s: %s", st.ID, reasonOr(st, "timed out"))}
	}
	return &exitError{code: exitRunOther, err: fmt.Errorf("run %s %s: %s", st.ID, st.Result, reasonOr(st, st.Result))}
}

func reasonOr(st runs.Status, def string) string {
	if st.Error != "" {
		return st.Error
	}
	return def
}

// writeArtifacts writes each artifact under dir, never following a symlink
// in any component below dir (each directory is opened from its parent's
// descriptor with O_NOFOLLOW, as --files-dir writes) and never replacing a
// file; paths are checked again here (the host's answer is not trusted to
// have done so).
func writeArtifacts(dir string, arts []runs.Artifact) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("--out %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	var written []string
	for _, a := range arts {
		if a.Error != "" {
			continue
		}
		clean, err := runs.CleanArtifactPath(a.Path)
		if err != nil || clean != a.Path {
			return written, fmt.Errorf("artifact path %q refused", a.Path)
		}
		target := filepath.Join(dir, filepath.FromSlash(clean))
		sub, name := path.Split(clean)
		sfd, err := atomicfile.OpenDirAt(dfd, strings.TrimSuffix(sub, "/"), 0o755)
		if err != nil {
			return written, fmt.Errorf("artifact %s: %w", target, err)
		}
		err = atomicfile.CreateAt(sfd, name, a.Data, 0o644)
		unix.Close(sfd)
		if err != nil {
			return written, fmt.Errorf("artifact %s: %w", target, err)
		}
		written = append(written, target)
	}
	return written, nil
}

// runAdminCmds are `run approve|deny|cancel|show|list`.
func runAdminCmds(g *globals) []*cobra.Command {
	one := func(use, short string, call func(c *client.Client, ctx context.Context, id string) (runs.Status, error)) *cobra.Command {
		return &cobra.Command{
			Use: use + " <run-id>", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				st, err := call(g.client(), cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(cmd, st)
				}
				printRun(cmd.OutOrStdout(), st)
				return nil
			},
		}
	}
	list := &cobra.Command{
		Use: "list", Short: "List runs (yours; an admin's: all)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			all, err := g.client().Runs(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(cmd, map[string]any{"runs": all})
			}
			for _, st := range all {
				printRun(cmd.OutOrStdout(), st)
			}
			return nil
		},
	}
	var project string
	creds := &cobra.Command{
		Use: "credentials", Short: "List the credentials your run (of --project) may ask for, and the variable each placeholder arrives in", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			all, err := g.client().Credentials(cmd.Context(), project)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(cmd, runs.CredentialList{Credentials: all})
			}
			for _, c := range all {
				fmt.Fprintf(cmd.OutOrStdout(), "%s $%s https://%s\n", c.Name, c.Variable, net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
			}
			return nil
		},
	}
	creds.Flags().StringVar(&project, "project", "", "the run's project (runs.projects); unset: a run of none")
	return []*cobra.Command{
		creds,
		one("approve", "Approve network for one run awaiting approval (admins)", (*client.Client).ApproveRun),
		one("deny", "Deny network for one run awaiting approval (admins)", (*client.Client).DenyRun),
		one("cancel", "Cancel a run (its owner or an admin)", (*client.Client).CancelRun),
		one("show", "Show one run", (*client.Client).Run),
		list,
	}
}

func printRun(w io.Writer, st runs.Status) {
	fields := []string{st.ID, st.State}
	if st.Result != "" {
		fields = append(fields, st.Result)
	}
	if st.ExitCode != nil {
		fields = append(fields, fmt.Sprintf("exit=%d", *st.ExitCode))
	}
	fields = append(fields, "mode="+st.Mode, fmt.Sprintf("owner=%d", st.OwnerUID))
	if st.Project != "" {
		fields = append(fields, "project="+st.Project)
	}
	if st.Network {
		fields = append(fields, "network")
	}
	if st.Standby {
		fields = append(fields, "standby")
	}
	if len(st.Credentials) > 0 {
		fields = append(fields, "credentials="+strings.Join(credentialsShown(st), ","))
	}
	if st.Error != "" {
		fields = append(fields, fmt.Sprintf("reason=%q", st.Error))
	}
	if st.StdoutTruncated {
		fields = append(fields, fmt.Sprintf("stdout-cut=%d-bytes-dropped", st.StdoutDroppedBytes))
	}
	if st.StderrTruncated {
		fields = append(fields, fmt.Sprintf("stderr-cut=%d-bytes-dropped", st.StderrDroppedBytes))
	}
	fmt.Fprintln(w, strings.Join(fields, "  "))
}

// credentialsShown names a run's credentials, each with the variable the
// run sees its placeholder in when it has one: gitlab(GITLAB_TOKEN).
func credentialsShown(st runs.Status) []string {
	return sessioncmd.CredentialsShown(st.Credentials, st.CredentialVariables)
}
