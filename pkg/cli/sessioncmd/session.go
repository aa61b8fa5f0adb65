// Package sessioncmd is sandbox-host's `session` command group (docs/api.md,
// Sessions): create, exec, cp, ls, pause, resume, close,
// approve and deny, over the host API. pkg/cli registers it into the root
// command. Guarantee: `session exec` exits with the command's status (124
// on timeout, 125 when the exec could not be carried out, 130 when
// interrupted, the exec then killed); stdin and copies are bounded before
// anything is sent.
package sessioncmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
)

// Env is what the group needs of the root command line: its API client
// (with the root's --socket and deadlines), --json, and how a failure
// becomes the process's exit status.
type Env struct {
	Client func() *client.Client
	JSON   func() bool
	// Exit fails the command with the exit status code; a nil err: the
	// command already reported why.
	Exit func(code int, err error) error
}

// Exit statuses of `session exec` beside the command's own: those of
// `sandbox-host run` (docker exec's convention).
const (
	exitTimeout     = 124
	exitOther       = 125
	exitInterrupted = 130
)

// prefix starts every line the group prints about itself.
const prefix = "sandbox-host: "

// maxExecStdin is sessionwire's bound of an exec's stdin.
const maxExecStdin = 256 << 10

// maxCopyBytes is sessions.maxFileBytes' upper bound.
const maxCopyBytes = 64 << 20

// Command is `sandbox-host session ...` (docs/api.md, Sessions).
func Command(g Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Sessions: a toolbox container that lives across execs (create, exec, cp, ls, pause, resume, close)",
	}
	var create apiwire.SessionCreate
	createCmd := &cobra.Command{
		Use: "create", Short: "Create a session; prints its id", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := g.Client().CreateSession(cmd.Context(), create)
			if err != nil {
				return err
			}
			if g.JSON() {
				return printJSON(cmd, st)
			}
			fmt.Fprintln(cmd.OutOrStdout(), st.ID)
			return nil
		},
	}
	f := createCmd.Flags()
	f.StringVar(&create.Project, "project", "", "project to mount read-only at /workspace (runs.projects)")
	f.IntVar(&create.MemoryMb, "memory", 0, "memory limit in MiB (default and most: sessions.memoryMb)")
	f.IntVar(&create.TTLSeconds, "ttl", 0, "remove the session after this many seconds (default and most: sessions.ttlSeconds)")
	f.BoolVar(&create.Network, "network", false, "give the session a broker: its execs may then ask for network, each approved by a human")
	f.StringArrayVar(&create.Credentials, "credential", nil, "egress.credentials name its network execs may ask for (repeatable; with --network)")

	list := &cobra.Command{
		Use: "list", Short: "List sessions (yours; an admin's: all)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := g.Client().Sessions(cmd.Context())
			if err != nil {
				return err
			}
			if g.JSON() {
				return printJSON(cmd, apiwire.SessionList{Sessions: all})
			}
			for _, st := range all {
				printSession(cmd.OutOrStdout(), st)
			}
			return nil
		},
	}
	one := func(use, short string, call func(*client.Client, context.Context, string) (apiwire.Session, error)) *cobra.Command {
		return &cobra.Command{
			Use: use + " <session-id>", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				st, err := call(g.Client(), cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if g.JSON() {
					return printJSON(cmd, st)
				}
				printSession(cmd.OutOrStdout(), st)
				return nil
			},
		}
	}
	cmd.AddCommand(createCmd, list,
		one("show", "Show one session", (*client.Client).Session),
		one("pause", "Pause a session (memory kept, no CPU; any request resumes it)", (*client.Client).PauseSession),
		one("resume", "Resume a paused session", (*client.Client).ResumeSession),
		one("close", "Close a session: its container and files are removed", (*client.Client).CloseSession),
		sessionExecCmd(g), sessionCpCmd(g), sessionLsCmd(g), sessionDecideCmd(g, true), sessionDecideCmd(g, false))
	return cmd
}

func printSession(w io.Writer, st apiwire.Session) {
	fmt.Fprintf(w, "%s %s owner=%d memory=%dMiB execs=%d/%d resumes=%d expires=%s\n", st.ID, st.State, st.OwnerUID,
		st.MemoryMb, st.Execs, st.ExecsTotal, st.Resumes, st.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
	printSessionNetwork(w, st) // network.go
}

// sessionExecCmd runs a command in a session like docker exec: output as
// it comes, the command's exit status.
func sessionExecCmd(g Env) *cobra.Command {
	var (
		x     apiwire.SessionExec
		env   []string
		stdin bool
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] <session-id> (-c CMD | -- EXECUTABLE [ARGS...])",
		Short: "Run a command in a session; prints its output as it comes and exits with its status",
		Long: `Run a command in a session, as its guest uid (--root: as root with a run's setup capabilities).
State stays between execs: files under /work, /output and /tmp, and processes left in the background.
Exit status: the command's; 124 on timeout; 125 when the exec could not be carried out; 130 when interrupted
(the exec is then killed).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, rest := args[0], args[1:]
			if x.Command == "" {
				if len(rest) == 0 {
					return errors.New("give the command after -- (argv mode) or with --command (shell mode)")
				}
				x.Executable, x.Args = rest[0], rest[1:]
			} else if len(rest) > 0 {
				return errors.New("give either --command or a command after --, not both")
			}
			if len(env) > 0 {
				x.Env = map[string]string{}
				for _, kv := range env {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						return fmt.Errorf("--env %q: want NAME=VALUE", kv)
					}
					x.Env[k] = v
				}
			}
			if stdin {
				data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxExecStdin+1))
				if err != nil {
					return err
				}
				if len(data) > maxExecStdin {
					return fmt.Errorf("--stdin: more than %d bytes", maxExecStdin)
				}
				x.Stdin = data
			}
			return sessionExec(cmd, g, id, x)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&x.Command, "command", "c", "", "shell command (sh -c) instead of an argv after --")
	f.StringVar(&x.Cwd, "cwd", "", "working directory (relative to /work, or under /output or /tmp)")
	f.StringArrayVar(&env, "env", nil, "NAME=VALUE to set (repeatable; not PATH, HOME, LD_*, proxies, SANDBOX_*)")
	f.IntVar(&x.TimeoutSeconds, "timeout", 0, "kill the exec after this many seconds (default 120, at most 3600)")
	f.BoolVar(&x.Root, "root", false, "run as root with exactly a run's setup capabilities")
	f.BoolVar(&stdin, "stdin", false, "send this command's standard input (at most 256 KiB) as the exec's")
	f.BoolVar(&x.Network, "network", false, "network for this exec (a session created with --network); waits for an admin's approval")
	f.StringArrayVar(&x.Credentials, "credential", nil, "credential this exec asks for (repeatable; declared at create; with --network)")
	return cmd
}

func sessionExec(cmd *cobra.Command, g Env, id string, x apiwire.SessionExec) error {
	ctx := cmd.Context()
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
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	var events []apiwire.SessionExecEvent
	res, err := g.Client().Exec(followCtx, id, x, func(ev apiwire.SessionExecEvent) error {
		if g.JSON() {
			events = append(events, ev)
			return nil
		}
		var err error
		switch ev.Type {
		case apiwire.ExecStdout:
			_, err = stdout.Write(ev.Data)
		case apiwire.ExecStderr:
			_, err = stderr.Write(ev.Data)
		case apiwire.ExecApproval:
			fmt.Fprintf(stderr, "%snetwork exec %s waits for an admin's approval: sandbox-host session approve %s %s (or deny)\n", prefix, ev.ExecID, id, ev.ExecID)
		}
		return err
	})
	if err != nil {
		if followCtx.Err() != nil {
			// The connection's end kills the exec in the session.
			fmt.Fprintf(stderr, "%sexec interrupted; it was killed\n", prefix)
			return g.Exit(exitInterrupted, nil)
		}
		var ce *client.Error
		if errors.As(err, &ce) {
			return err
		}
		return g.Exit(exitOther, err)
	}
	if g.JSON() {
		if err := printJSON(cmd, events); err != nil {
			return err
		}
	} else {
		if res.StdoutTruncated || res.StderrTruncated {
			fmt.Fprintf(stderr, "%soutput cut: %d stdout and %d stderr bytes dropped (sessions.maxOutputBytes)\n", prefix, res.StdoutDropped, res.StderrDropped)
		}
	}
	switch {
	case res.TimedOut:
		return g.Exit(exitTimeout, errors.New("the exec passed its timeout and was killed"))
	case res.ExitCode != 0:
		return g.Exit(res.ExitCode, nil)
	}
	return nil
}

// sessionCpCmd copies one file in or out (or a directory out, as a tar).
func sessionCpCmd(g Env) *cobra.Command {
	var (
		mode uint32
		tar  bool
	)
	cmd := &cobra.Command{
		Use:   "cp [--mode 0644] [--tar] (<local-file> <session-id>:<path> | <session-id>:<path> <local-file>)",
		Short: "Copy a file into or out of a session (--tar: a directory out, as a tar)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx := g.Client(), cmd.Context()
			if id, p, ok := sessionRef(args[1]); ok {
				if tar {
					return errors.New("--tar copies a directory out of a session")
				}
				data, err := readLocal(args[0])
				if err != nil {
					return err
				}
				f, err := c.PutFile(ctx, id, p, mode, data)
				if err != nil {
					return err
				}
				if g.JSON() {
					return printJSON(cmd, f)
				}
				return nil
			}
			id, p, ok := sessionRef(args[0])
			if !ok {
				return errors.New("one side must be <session-id>:<path>")
			}
			f, err := c.GetFile(ctx, id, p, tar)
			if err != nil {
				return err
			}
			if f.Changed {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s%q changed while it was read; the copy may be inconsistent\n", prefix, p)
			}
			if args[1] == "-" {
				_, err = cmd.OutOrStdout().Write(f.Data)
				return err
			}
			return atomicfile.WriteFile(args[1], f.Data, 0o644)
		},
	}
	cmd.Flags().Uint32Var(&mode, "mode", 0, "permission bits of a file copied in (default 0644)")
	cmd.Flags().BoolVar(&tar, "tar", false, "copy a directory out as a tar")
	return cmd
}

// sessionRef splits "<32 hex>:<path>".
func sessionRef(s string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(s, ":")
	if !ok || len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" || path == "" {
		return "", "", false
	}
	return id, path, true
}

func readLocal(p string) ([]byte, error) {
	var r io.Reader
	if p == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxCopyBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxCopyBytes {
		return nil, fmt.Errorf("%s: over %d bytes", p, maxCopyBytes)
	}
	return data, nil
}

// sessionLsCmd lists a directory of a session.
func sessionLsCmd(g Env) *cobra.Command {
	return &cobra.Command{
		Use: "ls <session-id> [path]", Short: "List a directory of a session (default: /work)", Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "."
			if len(args) == 2 {
				p = args[1]
			}
			l, err := g.Client().ListFiles(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			if g.JSON() {
				return printJSON(cmd, l)
			}
			for _, e := range l.Entries {
				// Names are the session's choice: quoted.
				fmt.Fprintf(cmd.OutOrStdout(), "%-7s %04o %10d %q\n", e.Type, e.Mode, e.Size, e.Name)
			}
			if l.Truncated {
				fmt.Fprintf(cmd.ErrOrStderr(), "%slisting cut at 10000 entries\n", prefix)
			}
			return nil
		},
	}
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
