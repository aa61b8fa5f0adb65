package sessioncmd

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// sessionDecideCmd approves or denies a session's network exec waiting for
// a human (the admin role; docs/api.md, Sessions).
func sessionDecideCmd(g Env, approve bool) *cobra.Command {
	use, short := "deny", "Deny a session's network exec waiting for approval: it never starts (admin)"
	if approve {
		use, short = "approve", "Approve a session's network exec waiting for approval (admin): it gets network for this exec only"
	}
	return &cobra.Command{
		Use: use + " <session-id> <exec-id>", Short: short, Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.Client()
			call := c.DenyExec
			if approve {
				call = c.ApproveExec
			}
			st, err := call(cmd.Context(), args[0], args[1])
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

// printSessionNetwork prints a network session's credentials and its
// network exec waiting for approval, quoted (a command is the guest's).
func printSessionNetwork(w io.Writer, st apiwire.Session) {
	if !st.Network {
		return
	}
	fmt.Fprintf(w, "  network credentials=%s exec=%s\n", strings.Join(st.Credentials, ","), st.NetworkExec)
	for _, a := range st.Approvals {
		what := strconv.Quote(a.Command)
		if a.Executable != "" {
			what = strconv.Quote(a.Executable)
			for _, arg := range a.Args {
				what += " " + strconv.Quote(arg)
			}
		}
		fmt.Fprintf(w, "  awaiting approval: exec %s root=%v timeout=%ds credentials=%s until %s: %s\n", a.ExecID, a.Root, a.TimeoutSeconds,
			strings.Join(CredentialsShown(a.Credentials, a.CredentialVariables), ","), a.Deadline.UTC().Format("2006-01-02T15:04:05Z"), what)
	}
}

// CredentialsShown names each of names with its variable in vars, as the
// approval lines of runs and sessions print them: "gh(GH_TOKEN)".
func CredentialsShown(names []string, vars map[string]string) []string {
	out := make([]string, len(names))
	for i, c := range names {
		out[i] = c
		if v := vars[c]; v != "" {
			out[i] = c + "(" + v + ")"
		}
	}
	return out
}
