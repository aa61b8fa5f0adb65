package config

import (
	"fmt"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Prechecks configures precheck scripts (DESIGN.md section 14, package
// precheck): each run is a sealed container of the worker image whose
// broker reaches only the MCP tools granted with the script, never more
// than Grants allow for the channel.
type Prechecks struct {
	Enabled bool `mapstructure:"enabled"`
	// Grants are what an operator allows per channel: a script may be
	// granted any subset of the tools of the entries matching its channel.
	Grants   []PrecheckGrant `mapstructure:"grants"`
	MemoryMB int             `mapstructure:"memoryMb"`
	CPUs     float64         `mapstructure:"cpus"`
	Pids     int64           `mapstructure:"pids"`
	TmpfsMB  int             `mapstructure:"tmpfsMb"`
	// TimeoutSeconds bounds a run from container creation; the container
	// is killed and removed at it.
	TimeoutSeconds int `mapstructure:"timeoutSeconds"`
	// MaxCalls is a run's budget of MCP calls, refused ones included.
	MaxCalls        int `mapstructure:"maxCalls"`
	MaxNoteChars    int `mapstructure:"maxNoteChars"`
	MaxContextChars int `mapstructure:"maxContextChars"`
}

// PrecheckGrant allows scripts of Channel (an exact channel key, or "*" for
// every channel) to be granted Tools of the MCP server Server.
type PrecheckGrant struct {
	Channel string   `mapstructure:"channel"`
	Server  string   `mapstructure:"server"`
	Tools   []string `mapstructure:"tools"`
}

// Bounds of the prechecks keys.
const (
	MaxPrecheckGrants  = 256
	MaxPrecheckTimeout = 600
)

// PrecheckAllows reports whether the operator allows a script of channel
// to be granted tool on server.
func (p Prechecks) PrecheckAllows(channel, server, tool string) bool {
	for _, g := range p.Grants {
		if (g.Channel != "*" && g.Channel != channel) || g.Server != server {
			continue
		}
		for _, t := range g.Tools {
			if t == tool {
				return true
			}
		}
	}
	return false
}

func (c *Config) validatePrechecks(bad func(key, format string, a ...any)) {
	p := c.Prechecks
	for _, r := range []struct {
		key      string
		v        int64
		min, max int64
	}{
		{"prechecks.memoryMb", int64(p.MemoryMB), 64, 65536},
		{"prechecks.pids", p.Pids, 8, 4096},
		{"prechecks.tmpfsMb", int64(p.TmpfsMB), 1, 4096},
		{"prechecks.timeoutSeconds", int64(p.TimeoutSeconds), 2, MaxPrecheckTimeout},
		{"prechecks.maxCalls", int64(p.MaxCalls), 0, precheck.MaxCallsLimit},
		{"prechecks.maxNoteChars", int64(p.MaxNoteChars), 1, precheck.MaxNoteCharsLimit},
		{"prechecks.maxContextChars", int64(p.MaxContextChars), 1, precheck.MaxContextCharsLimit},
	} {
		if r.v < r.min || r.v > r.max {
			bad(r.key, "must be %d to %d, got %d", r.min, r.max, r.v)
		}
	}
	if !(p.CPUs >= 0.01 && p.CPUs <= 64) {
		bad("prechecks.cpus", "must be 0.01 to 64, got %v", p.CPUs)
	}
	if p.TmpfsMB >= p.MemoryMB && p.MemoryMB >= 64 {
		bad("prechecks.tmpfsMb", "must stay below prechecks.memoryMb (tmpfs counts against memory), got %d >= %d", p.TmpfsMB, p.MemoryMB)
	}
	if len(p.Grants) > MaxPrecheckGrants {
		bad("prechecks.grants", "at most %d entries", MaxPrecheckGrants)
		return
	}
	servers := map[string]MCP{}
	for _, s := range c.MCP {
		servers[s.Name] = s
	}
	for i, g := range p.Grants {
		key := fmt.Sprintf("prechecks.grants[%d]", i)
		if g.Channel != "*" {
			if err := ids.ValidChannel(g.Channel); err != nil {
				bad(key+".channel", "must be a channel key or \"*\": %v", err)
			}
		}
		s, ok := servers[g.Server]
		if !ok {
			bad(key+".server", "%q must name a server declared under mcp", g.Server)
			continue
		}
		if len(g.Tools) == 0 || len(g.Tools) > precheck.MaxToolsPerServer {
			bad(key+".tools", "must list 1 to %d tools", precheck.MaxToolsPerServer)
			continue
		}
		for j, t := range g.Tools {
			tkey := fmt.Sprintf("%s.tools[%d]", key, j)
			if !protocol.ValidMCPToolName(t) {
				bad(tkey, "must be %s", protocol.MCPToolNameRule)
				continue
			}
			if s.Discover {
				continue // its tools are known at startup only; the host checks them then
			}
			declared := false
			for _, d := range s.Tools {
				declared = declared || d.Name == t
			}
			if !declared {
				bad(tkey, "%q is not a tool declared for mcp server %q", t, g.Server)
			}
		}
	}
}
