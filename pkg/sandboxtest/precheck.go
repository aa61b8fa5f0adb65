package sandboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck/runner"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// PrecheckMCP is the broker's MCP route as the runner sees it: search/find
// answers {"hits":N}; anything else is refused.
type PrecheckMCP struct {
	mu    sync.Mutex
	Calls []string
}

func (m *PrecheckMCP) Call(ctx context.Context, route string, body any) (json.RawMessage, error) {
	data, _ := json.Marshal(body)
	var req struct {
		ID     int `json:"id"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	json.Unmarshal(data, &req)
	m.mu.Lock()
	m.Calls = append(m.Calls, route+" "+req.Params.Name)
	m.mu.Unlock()
	if route != "/mcp/search" || req.Params.Name != "find" {
		return nil, errors.New("broker answered status 404")
	}
	id, _ := json.Marshal(req.ID)
	return json.RawMessage(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"structuredContent":{"hits":4}}}`), nil
}

// PrecheckRunner is a container that runs the real runner in-process on the job
// it is given.
func PrecheckRunner(mcp *PrecheckMCP) func(ctx context.Context, spec sandbox.ContainerSpec, stdin []byte) (sandbox.RunResult, error) {
	return func(ctx context.Context, spec sandbox.ContainerSpec, stdin []byte) (sandbox.RunResult, error) {
		var job precheck.Job
		if err := json.Unmarshal(stdin, &job); err != nil {
			return sandbox.RunResult{ExitCode: 2}, nil
		}
		out, _ := precheck.Encode(runner.Run(ctx, job, mcp, nil))
		return sandbox.RunResult{Stdout: out}, nil
	}
}

// PrecheckExtra enables prechecks with the default minute (tests about
// anything but the deadline must not race it: a 2 s bound failed them on
// a busy machine) and grants channel room the search server's find.
const PrecheckExtra = `
prechecks:
  enabled: true
  timeoutSeconds: 60
  grants:
    - channel: room
      server: search
      tools: [find]
`
