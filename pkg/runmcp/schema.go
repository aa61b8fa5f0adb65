package runmcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// inputSchema is the seed's parameter table (pi-sandbox-docker's
// sandbox_run), names, types and descriptions as written there, plus one
// property beyond the seed: credentials (docs/credentialed-egress.md),
// optional, so a seed client never needs it. No property
// is required: exactly one of command or executable is, which the host
// checks (a top-level oneOf is something many clients cannot show).
const inputSchema = `{
  "type": "object",
  "properties": {
    "command": {
      "type": "string",
      "description": "Shell command (mutually exclusive with executable)"
    },
    "executable": {
      "type": "string",
      "description": "Executable to run without a shell"
    },
    "args": {
      "type": "array",
      "items": {"type": "string"},
      "description": "Arguments for the executable (argv mode)"
    },
    "setup": {
      "type": "array",
      "items": {"type": "string"},
      "description": "Privileged shell commands run as root before the main command (e.g. package install)"
    },
    "network": {
      "type": "boolean",
      "default": false,
      "description": "Enable network for THIS run only — requires human approval. Default false."
    },
    "timeout_seconds": {
      "type": "number",
      "default": 120,
      "minimum": 1,
      "maximum": 3600,
      "description": "Timeout in seconds (default 120, max 3600)"
    },
    "artifacts": {
      "type": "array",
      "items": {"type": "string"},
      "description": "Relative paths under /output to export to the host"
    },
    "credentials": {
      "type": "array",
      "items": {"type": "string"},
      "description": "Names of the operator's credentialed destinations (e.g. a private git host) for THIS run: the host's proxy adds the credential to the run's requests to that host, the run never sees it. Needs network: true; the human's approval names them."
    }
  },
  "additionalProperties": false
}`

// tool is sandbox_run as tools/list shows it.
func tool(project string) *mcp.Tool {
	ws := "an empty directory"
	if project != "" {
		ws = fmt.Sprintf("the project %q", project)
	}
	return &mcp.Tool{
		Name:  ToolName,
		Title: "Run code in a disposable sandbox",
		Description: "Execute code inside a fresh, hardened, offline Debian container that is removed when the run ends " +
			"(success, failure, timeout or cancellation); nothing persists between runs.\n" +
			"Two modes, exactly one: `command` (shell: pipelines, redirects, &&) or `executable` with `args` (no shell).\n" +
			"Filesystem: /workspace is " + ws + ", mounted read-only (the run can never modify it); " +
			"/output is writable and ephemeral: write files there and name them in `artifacts` (relative paths under /output) to get them back; " +
			"/tmp is writable and ephemeral. Absolute paths, `..`, /workspace and /tmp are refused as artifacts.\n" +
			"The main command runs as an unprivileged user; `setup` commands run first, as root (e.g. package installation).\n" +
			"Network policy: off by default. `network: true` asks the human to approve network for this one run (no standing grant); " +
			"if the human declines, or this client cannot ask, nothing runs. `credentials` (beyond the seed) names credentialed destinations the operator declared " +
			"(a private git host, an API): with the human's approval the host's proxy adds the credential to this run's requests to that host; " +
			"`git clone https://<host>/...` and `curl https://<host>/...` just work, and the run never holds the credential.\n" +
			"The result holds the exit code, the duration, stdout and stderr (bounded) and the artifacts as embedded resources; " +
			"a non-zero exit, a timeout or a refusal is reported as a tool error.",
		InputSchema: json.RawMessage(inputSchema),
		Annotations: &mcp.ToolAnnotations{Title: "Run code in a disposable sandbox"},
	}
}

// errArgs is a refusal of the call's arguments; its text goes to the client.
type errArgs struct{ msg string }

func (e *errArgs) Error() string { return e.msg }

func refuse(format string, a ...any) error { return &errArgs{fmt.Sprintf(format, a...)} }

// maxArgsBytes bounds the arguments object (the transports bound a message
// too; this keeps the refusal a tool error).
const maxArgsBytes = 1 << 20

// params maps a tools/call's arguments onto runs.Params. It refuses what
// does not map: a non-object, an unknown property (names are matched
// exactly, not as encoding/json would, case-insensitively), a value of the
// wrong type, a timeout that is not a positive whole number. null counts
// as absent. Everything else (modes, paths, ranges) is the host's to judge.
func params(raw json.RawMessage, project string) (runs.Params, error) {
	p := runs.Params{Project: project}
	raw = bytes.TrimSpace(raw)
	if len(raw) > maxArgsBytes {
		return p, refuse("arguments: more than %d bytes", maxArgsBytes)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return p, nil
	}
	var fields map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return p, refuse("arguments: not a JSON object")
	}
	for name, v := range fields {
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		var err error
		switch name {
		case "command":
			err = str(v, &p.Command)
		case "executable":
			err = str(v, &p.Executable)
		case "args":
			err = strs(v, &p.Args)
		case "setup":
			err = strs(v, &p.Setup)
		case "artifacts":
			err = strs(v, &p.Artifacts)
		case "credentials":
			err = strs(v, &p.Credentials)
		case "network":
			if json.Unmarshal(v, &p.Network) != nil {
				err = errors.New("must be a boolean")
			}
		case "timeout_seconds":
			p.TimeoutSeconds, err = seconds(v)
		default:
			return p, refuse("unknown property %q (sandbox_run takes command, executable, args, setup, network, timeout_seconds, artifacts, credentials)", truncate(name, 64))
		}
		if err != nil {
			return p, refuse("%s: %v", name, err)
		}
	}
	return p, nil
}

func str(v json.RawMessage, out *string) error {
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, out) != nil {
		return errors.New("must be a string")
	}
	return nil
}

func strs(v json.RawMessage, out *[]string) error {
	var items []json.RawMessage
	if len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &items) != nil {
		return errors.New("must be an array of strings")
	}
	list := make([]string, len(items))
	for i, it := range items {
		if str(bytes.TrimSpace(it), &list[i]) != nil {
			return errors.New("must be an array of strings")
		}
	}
	*out = list
	return nil
}

// seconds accepts a JSON number with a whole value of at least 1 (60 and
// 60.0 alike); 0 would silently mean the default in runs.Params.
func seconds(v json.RawMessage) (int, error) {
	var f float64
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) || json.Unmarshal(v, &f) != nil {
		return 0, errors.New("must be a number")
	}
	if f != math.Trunc(f) || f < 1 || f > math.MaxInt32 {
		return 0, fmt.Errorf("must be a whole number of seconds from 1 to %d", runs.MaxTimeoutSeconds)
	}
	return int(f), nil
}

// truncate bounds s to n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "") + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
