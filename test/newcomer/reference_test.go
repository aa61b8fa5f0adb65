package newcomer

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/roundtable-sandbox/sandbox/pkg/cli"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
)

// The API reference's command summary (docs/api.md, the block that starts
// with "sandbox-host [--socket") and the endpoint tables of every document
// are checked against the code, so neither can drift: the cobra command
// tree of sandbox-host (pkg/cli Tree) and the host's route table (pkg/host
// Endpoints, which the router dispatches from).

// apiReference is the API and CLI reference, where the command summary
// and the whole endpoint table live.
const apiReference = "docs/api.md"

// reference returns docs/api.md.
func reference(t *testing.T) string {
	t.Helper()
	doc := read(t, apiReference)
	if !strings.HasPrefix(doc, "# API and CLI reference\n") {
		t.Fatalf("%s does not start with its title \"# API and CLI reference\"", apiReference)
	}
	return doc
}

// allDocs is every document joined: an endpoint row anywhere is checked.
func allDocs(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, doc := range readDocs(t) {
		b.WriteString(doc)
		b.WriteString("\n")
	}
	return b.String()
}

// summaryBlock is the command summary: the code block whose first line is
// the root command's.
func summaryBlock(section string) (string, bool) {
	_, rest, ok := strings.Cut(section, "```\nsandbox-host [")
	if !ok {
		return "", false
	}
	block, _, ok := strings.Cut("sandbox-host ["+rest, "\n```")
	return block, ok
}

var (
	pathWordRe = regexp.MustCompile(`^[a-z][a-z-]*(\|[a-z][a-z-]*)*$`)
	// A flag starts a token or follows [ ( or |: "--name", "-c".
	flagRe    = regexp.MustCompile(`(?:^|[\s\[(|])(--?[a-z][a-z-]*)`)
	commentRe = regexp.MustCompile(`\s#.*$`)
)

// summaryLine is one documented command: its path(s) and the flags on it.
type summaryLine struct {
	paths []string
	flags []string
}

// parseSummary reads the block: the root line's flags, then one command a
// line, "  <words> <arguments and flags>  # comment", where the last word
// may list alternatives ("channel off|status <channel>") that share the
// line's flags.
func parseSummary(block string) (rootFlags []string, lines []summaryLine, errs []string) {
	all := strings.Split(block, "\n")
	for _, m := range flagRe.FindAllStringSubmatch(commentRe.ReplaceAllString(all[0], ""), -1) {
		rootFlags = append(rootFlags, m[1])
	}
	for _, l := range all[1:] {
		l = commentRe.ReplaceAllString(l, "")
		words := strings.Fields(l)
		n := 0
		for n < len(words) && pathWordRe.MatchString(words[n]) {
			n++
		}
		if n == 0 {
			errs = append(errs, fmt.Sprintf("line %q names no command", strings.TrimSpace(l)))
			continue
		}
		var sl summaryLine
		prefix := strings.Join(words[:n-1], " ")
		for _, alt := range strings.Split(words[n-1], "|") {
			sl.paths = append(sl.paths, strings.TrimSpace(prefix+" "+alt))
		}
		for _, w := range words[:n-1] {
			if strings.Contains(w, "|") {
				errs = append(errs, fmt.Sprintf("line %q: alternatives only in the last command word", strings.TrimSpace(l)))
			}
		}
		for _, m := range flagRe.FindAllStringSubmatch(strings.Join(words[n:], " "), -1) {
			sl.flags = append(sl.flags, m[1])
		}
		lines = append(lines, sl)
	}
	return rootFlags, lines, errs
}

// flagNames are a flag set's names as written on a command line, without
// --help.
func flagNames(fs *pflag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Hidden {
			return
		}
		out = append(out, "--"+f.Name)
		if f.Shorthand != "" {
			out = append(out, "-"+f.Shorthand)
		}
	})
	slices.Sort(out)
	return out
}

// commands are the tree's runnable commands by path (without the root's
// name) with their own flags.
func commands(root *cobra.Command) map[string][]string {
	out := map[string][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c != root && c.Runnable() {
			path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
			out[path] = flagNames(c.LocalFlags())
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(root)
	return out
}

// summaryMismatches compares the block with the command tree; each
// difference is one message.
func summaryMismatches(root *cobra.Command, block string) []string {
	rootFlags, lines, out := parseSummary(block)
	want := flagNames(root.PersistentFlags())
	for _, f := range want {
		if !slices.Contains(rootFlags, f) {
			out = append(out, fmt.Sprintf("global flag %s is not on the first line", f))
		}
	}
	for _, f := range rootFlags {
		if !slices.Contains(want, f) {
			out = append(out, fmt.Sprintf("global flag %s does not exist", f))
		}
	}
	cmds := commands(root)
	documented := map[string][]string{} // path -> flags on its lines
	for _, l := range lines {
		for _, p := range l.paths {
			flags, ok := cmds[p]
			if !ok {
				out = append(out, fmt.Sprintf("%q is not a command of sandbox-host", p))
				continue
			}
			documented[p] = append(documented[p], l.flags...)
			for _, f := range l.flags {
				if !slices.Contains(flags, f) {
					out = append(out, fmt.Sprintf("%q has no flag %s", p, f))
				}
			}
		}
	}
	for p, flags := range cmds {
		got, ok := documented[p]
		if !ok {
			out = append(out, fmt.Sprintf("command %q is missing", p))
			continue
		}
		for _, f := range flags {
			if !slices.Contains(got, f) {
				out = append(out, fmt.Sprintf("%q: flag %s is missing", p, f))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// endpointRowRe matches a row of an endpoint table: "| `METHOD /path` | who |".
var endpointRowRe = regexp.MustCompile("(?m)^\\| `([A-Z]+) (/[^`]*)` \\| ([^|]*) \\|(.*)$")

func roleOf(who string) (host.Role, bool) {
	switch {
	case strings.HasPrefix(who, "client"):
		return host.RoleClient, true
	case strings.HasPrefix(who, "admin"):
		return host.RoleAdmin, true
	case who == "any peer":
		return host.RoleNone, true
	}
	return 0, false
}

// endpointMismatches compares the documents' endpoint rows with the route
// table: every row is a real endpoint with its role; the first table of the
// reference (the whole API) lists every endpoint, the mode row every mode.
func endpointMismatches(eps []host.Endpoint, modes []string, docs, section string) []string {
	var out []string
	real := map[string]host.Role{}
	for _, e := range eps {
		real[e.Method+" "+e.Pattern] = e.Role
	}
	for _, m := range endpointRowRe.FindAllStringSubmatch(docs, -1) {
		key, who := m[1]+" "+m[2], strings.TrimSpace(m[3])
		role, ok := real[key]
		if !ok {
			out = append(out, fmt.Sprintf("row %s is not an endpoint of the host", key))
			continue
		}
		if got, ok := roleOf(who); !ok || got != role {
			out = append(out, fmt.Sprintf("row %s says %q, the route needs %s", key, who, role))
		}
		if key == "PUT /v1/channels/{channel}/mode" {
			for _, mode := range modes {
				if !strings.Contains(m[4], `"`+mode+`"`) {
					out = append(out, fmt.Sprintf("row %s does not name mode %q", key, mode))
				}
			}
		}
	}
	_, table, ok := strings.Cut(section, "\n| endpoint | who |")
	if !ok {
		return append(out, "the reference has no endpoint table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	listed := map[string]bool{}
	for _, m := range endpointRowRe.FindAllStringSubmatch(table, -1) {
		listed[m[1]+" "+m[2]] = true
	}
	for _, e := range eps {
		if !listed[e.Method+" "+e.Pattern] {
			out = append(out, fmt.Sprintf("endpoint %s %s is missing from the table", e.Method, e.Pattern))
		}
	}
	slices.Sort(out)
	return out
}

func TestCommandSummaryMatchesTheCLI(t *testing.T) {
	block, ok := summaryBlock(reference(t))
	if !ok {
		t.Fatalf("%s has no command summary block starting \"sandbox-host [\"", apiReference)
	}
	for _, m := range summaryMismatches(cli.Tree(), block) {
		t.Errorf("%s command summary: %s", apiReference, m)
	}
}

func TestEndpointTableMatchesTheRoutes(t *testing.T) {
	for _, m := range endpointMismatches(host.Endpoints(), host.Modes, allDocs(t), reference(t)) {
		t.Errorf("endpoint table (%s and every document's rows): %s", apiReference, m)
	}
}

// The checks catch drift: a fake tree and table against documents that
// miss, add or misstate one thing each.
func TestReferenceChecksCatchDrift(t *testing.T) {
	root := &cobra.Command{Use: "sandbox-host"}
	root.PersistentFlags().Bool("json", false, "")
	run := &cobra.Command{Use: "run", RunE: func(*cobra.Command, []string) error { return nil }}
	run.Flags().StringP("command", "c", "", "")
	run.Flags().Bool("network", false, "")
	show := &cobra.Command{Use: "show", RunE: func(*cobra.Command, []string) error { return nil }}
	cancel := &cobra.Command{Use: "cancel", RunE: func(*cobra.Command, []string) error { return nil }}
	run.AddCommand(show, cancel)
	root.AddCommand(run)
	good := "sandbox-host [--json] <command>\n  run [--network] (-c|--command CMD | -- EXE)\n  run show|cancel <id>  # --ignored in a comment"
	cmdTests := []struct {
		name, block string
		want        []string
	}{
		{"match", good, nil},
		{"missing command", "sandbox-host [--json]\n  run [--network] (-c|--command CMD)\n  run show <id>", []string{`command "run cancel" is missing`}},
		{"missing flag", "sandbox-host [--json]\n  run (-c|--command CMD)\n  run show|cancel <id>", []string{`"run": flag --network is missing`}},
		{"extra command", good + "\n  run approve <id>", []string{`"run approve" is not a command of sandbox-host`}},
		{"extra flag", "sandbox-host [--json]\n  run [--network] [--detach] (-c|--command CMD)\n  run show|cancel <id>", []string{`"run" has no flag --detach`}},
		{"global flag missing", "sandbox-host <command>\n  run [--network] (-c|--command CMD)\n  run show|cancel <id>", []string{"global flag --json is not on the first line"}},
	}
	for _, tt := range cmdTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summaryMismatches(root, tt.block); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	eps := []host.Endpoint{{Method: "GET", Pattern: "/v1/health", Role: host.RoleNone},
		{Method: "PUT", Pattern: "/v1/channels/{channel}/mode", Role: host.RoleAdmin}}
	modes := []string{"on", "off"}
	row1 := "| `GET /v1/health` | any peer | -> ok |\n"
	row2 := "| `PUT /v1/channels/{channel}/mode` | admin | `{mode:\"on\"\\|\"off\"}` |\n"
	table := func(rows ...string) string {
		return "\n| endpoint | who | x |\n|---|---|---|\n" + strings.Join(rows, "") + "\n"
	}
	epTests := []struct {
		name, doc string
		want      []string
	}{
		{"match", table(row1, row2), nil},
		{"missing endpoint", table(row1), []string{"endpoint PUT /v1/channels/{channel}/mode is missing from the table"}},
		{"extra endpoint", table(row1, row2, "| `POST /v1/explode` | client | x |\n"), []string{"row POST /v1/explode is not an endpoint of the host"}},
		{"wrong role", table(row1, strings.Replace(row2, "| admin |", "| client |", 1)), []string{`row PUT /v1/channels/{channel}/mode says "client", the route needs admin`}},
		{"missing mode", table(row1, strings.Replace(row2, `\|"off"`, "", 1)), []string{`row PUT /v1/channels/{channel}/mode does not name mode "off"`}},
	}
	for _, tt := range epTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := endpointMismatches(eps, modes, tt.doc, tt.doc); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
