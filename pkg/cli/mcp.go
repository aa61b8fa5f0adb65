package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/runmcp"
)

// The host API client is the MCP server's Runner.
var _ runmcp.Runner = (*client.Client)(nil)

// mcpCmd serves the sandbox_run MCP tool (package runmcp) backed by the
// host API, as the user who runs it: stdio by default (stdout is the
// protocol, logs go to stderr), Streamable HTTP with --http.
func mcpCmd(g *globals) *cobra.Command {
	var project, httpAddr, logLevel string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox_run MCP tool over stdio (default) or Streamable HTTP (--http)",
		Long: "mcp is an MCP server with one tool, sandbox_run (the seed's parameters), that runs code through the host API (--socket) as the user who starts it.\n" +
			"--project names the operator-declared project every run sees read-only at /workspace; clients never pass paths.\n" +
			"Network runs are asked to the client's human through MCP elicitation, then approved on the host, which needs the host's admin role; a client without elicitation gets no network and nothing runs.\n" +
			"--http unix:/path serves Streamable HTTP at /mcp on a socket of mode 0660; --http 127.0.0.1:PORT on loopback only (every local user can reach it: prefer the socket); refused when the host gives this user the admin role, and a TCP server never offers network.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := newLogger(g, logLevel)
			if httpAddr == "" {
				srv := runmcp.NewServer(g.client(), runmcp.Options{Project: project, Logger: log, Context: ctx})
				log.Info("serving sandbox_run over stdio", slog.String("project", project))
				return runmcp.ServeStdio(ctx, srv, g.in.Stdin, g.in.Stdout)
			}
			ln, err := runmcp.Listen(httpAddr)
			if err != nil {
				return err
			}
			if ln.TCP() {
				if err := checkTCPRole(ctx, g.client()); err != nil {
					ln.Close()
					return err
				}
			}
			srv := runmcp.NewServer(g.client(), runmcp.Options{Project: project, Logger: log, Context: ctx, TCP: ln.TCP()})
			log.Info("serving sandbox_run over Streamable HTTP", slog.String("at", ln.Where), slog.String("project", project))
			return runmcp.ServeHTTP(ctx, srv, ln, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&project, "project", "", "project (runs.projects name) mounted read-only at /workspace; empty: an empty /workspace")
	f.StringVar(&httpAddr, "http", "", "serve Streamable HTTP instead of stdio: unix:/abs/path or a loopback IP:PORT")
	f.StringVar(&logLevel, "log-level", "info", "log level on stderr: debug, info, warn, error")
	return cmd
}

// checkTCPRole asks the host which role it gives this user (its health
// answer) and refuses a TCP listener unless it is the client role
// (runmcp.CheckTCPRole).
func checkTCPRole(ctx context.Context, c *client.Client) error {
	h, err := c.Health(ctx)
	if err != nil {
		return fmt.Errorf("--http on a TCP port: could not ask the host for this user's role: %w", err)
	}
	return runmcp.CheckTCPRole(h.Role)
}

// The host's client drives sessions: `sandbox-host mcp` serves the
// session tools beside sandbox_run.
var _ runmcp.SessionRunner = (*client.Client)(nil)
