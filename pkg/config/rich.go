package config

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// DefaultRichReplyBudget is rich.replyBudgetBytes' default: two reply
// packets at their bound, what the shipped unit's MemoryMax=1G leaves room
// for beside the runs; MaxRichReplyBudget its bound, for an operator who
// raised MemoryMax.
const (
	DefaultRichReplyBudget = 2 * richproto.MaxPacketBytes
	MaxRichReplyBudget     = 256 << 30
)

// Rich configures rich channels (DESIGN.md section 13): a long-lived
// channel container of the worker image running `sandbox-worker rich` and a
// long-lived channel broker, started when a rich channel's turn needs them
// and stopped after IdleSeconds without turns.
type Rich struct {
	Enabled bool `mapstructure:"enabled"`
	// AnthropicURL is the trusted Anthropic API base (https).
	AnthropicURL string `mapstructure:"anthropicUrl"`
	// AllowInsecureLoopbackHTTP permits a plain-http loopback AnthropicURL
	// (and compaction.url); tests only.
	AllowInsecureLoopbackHTTP bool    `mapstructure:"allowInsecureLoopbackHTTP"`
	IdleSeconds               int     `mapstructure:"idleSeconds"`
	StartTimeoutSeconds       int     `mapstructure:"startTimeoutSeconds"`
	TurnTimeoutSeconds        int     `mapstructure:"turnTimeoutSeconds"`
	MemoryMB                  int     `mapstructure:"memoryMb"`
	CPUs                      float64 `mapstructure:"cpus"`
	Pids                      int64   `mapstructure:"pids"`
	TmpfsMB                   int     `mapstructure:"tmpfsMb"`
	// MaxCalls is a turn's budget of credential-bearing calls.
	MaxCalls int `mapstructure:"maxCalls"`
	// ReplyBudgetBytes bounds the reply packets the host holds at once,
	// across rich channels (richsession's reply budget); a packet waits,
	// within its turn's deadline, while others hold it.
	ReplyBudgetBytes int64          `mapstructure:"replyBudgetBytes"`
	Compaction       RichCompaction `mapstructure:"compaction"`
	// SkillsDir is an operator skills tree mounted read-only at /skills in
	// every rich container ("" none); a profile's skillsDir replaces it.
	SkillsDir string `mapstructure:"skillsDir"`
}

// RichCompaction is the operator's host-side compactor; Kind "" means none
// (the worker's own summary only).
type RichCompaction struct {
	Kind                      string   `mapstructure:"kind"` // "" | exec | http
	Argv                      []string `mapstructure:"argv"`
	URL                       string   `mapstructure:"url"`
	Credential                string   `mapstructure:"credential"`
	AllowInsecureLoopbackHTTP bool     `mapstructure:"allowInsecureLoopbackHTTP"`
	TimeoutSeconds            int      `mapstructure:"timeoutSeconds"`
	MaxRequestBytes           int64    `mapstructure:"maxRequestBytes"`
	Engine                    string   `mapstructure:"engine"`
}

// Profile is what a rich channel runs with: a fixed model, its output
// limit and thinking ceiling, the MCP servers and host tools it may use
// (names of the top-level mcp and tools entries) and its model credential.
type Profile struct {
	Name            string   `mapstructure:"name"`
	Model           string   `mapstructure:"model"`
	MaxOutputTokens int      `mapstructure:"maxOutputTokens"`
	Thinking        string   `mapstructure:"thinking"`
	MCP             []string `mapstructure:"mcp"`
	Tools           []string `mapstructure:"tools"`
	// Credential names the model credential; "" selects it as for sealed
	// turns (credentials.rules by channel, else credentials.default).
	Credential string `mapstructure:"credential"`
	// CredentialKind: apiKey (x-api-key) or oauth (bearer); "" is apiKey.
	CredentialKind string `mapstructure:"credentialKind"`
	// SkillsDir replaces rich.skillsDir for this profile.
	SkillsDir string `mapstructure:"skillsDir"`
}

// Bounds of the rich keys.
const (
	MaxProfiles        = 64
	MinRichIdleSeconds = 10
	MaxRichIdleSeconds = 86400
	MaxRichTurnSeconds = 600
)

var profileNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidProfileName reports whether s may name a profile.
func ValidProfileName(s string) bool { return profileNameRe.MatchString(s) }

// Profile returns the named profile.
func (c *Config) Profile(name string) (Profile, bool) {
	for _, p := range c.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// RichIdle, RichStartTimeout and RichTurnTimeout are the rich durations.
func (c *Config) RichIdle() time.Duration { return time.Duration(c.Rich.IdleSeconds) * time.Second }
func (c *Config) RichStartTimeout() time.Duration {
	return time.Duration(c.Rich.StartTimeoutSeconds) * time.Second
}
func (c *Config) RichTurnTimeout() time.Duration {
	return time.Duration(c.Rich.TurnTimeoutSeconds) * time.Second
}

// RichPolicy is the rich section of a channel's broker policy for profile p.
func (c *Config) RichPolicy(p Profile, channel string) policy.Rich {
	cred := p.Credential
	if cred == "" {
		cred = c.SelectCredential(channel, "", "")
	}
	r := policy.Rich{URL: c.Rich.AnthropicURL, AllowHTTP: c.Rich.AllowInsecureLoopbackHTTP, Model: p.Model,
		MaxOutputTokens: p.MaxOutputTokens, Thinking: p.Thinking, Credential: cred, CredentialKind: p.CredentialKind,
		MaxCalls: c.Rich.MaxCalls}
	if k := c.Rich.Compaction; k.Kind != "" {
		r.Compactor = &policy.Compactor{Kind: k.Kind, Argv: slices.Clone(k.Argv), URL: k.URL, Credential: k.Credential,
			AllowHTTP: k.AllowInsecureLoopbackHTTP, TimeoutSeconds: k.TimeoutSeconds, MaxRequestBytes: k.MaxRequestBytes,
			Engine: k.Engine}
	}
	return r
}

func (c *Config) applyRichDefaults() {
	for i := range c.Profiles {
		p := &c.Profiles[i]
		if p.MaxOutputTokens == 0 {
			p.MaxOutputTokens = policy.DefaultRichOutputTokens
		}
		if p.Thinking == "" {
			p.Thinking = "medium"
		}
		if p.CredentialKind == "" {
			p.CredentialKind = policy.CredentialAPIKey
		}
	}
}

func (c *Config) validateRich(bad func(key, format string, a ...any)) {
	r := c.Rich
	if err := policy.CheckURL(r.AnthropicURL, r.AllowInsecureLoopbackHTTP); err != nil {
		bad("rich.anthropicUrl", "%v (plain http only with rich.allowInsecureLoopbackHTTP: true and a loopback host, for tests)", err)
	}
	if r.IdleSeconds < MinRichIdleSeconds || r.IdleSeconds > MaxRichIdleSeconds {
		bad("rich.idleSeconds", "must be %d to %d, got %d", MinRichIdleSeconds, MaxRichIdleSeconds, r.IdleSeconds)
	}
	if r.StartTimeoutSeconds < 1 || r.StartTimeoutSeconds > 600 {
		bad("rich.startTimeoutSeconds", "must be 1 to 600, got %d", r.StartTimeoutSeconds)
	}
	if r.TurnTimeoutSeconds < 1 || r.TurnTimeoutSeconds > MaxRichTurnSeconds {
		bad("rich.turnTimeoutSeconds", "must be 1 to %d, got %d", MaxRichTurnSeconds, r.TurnTimeoutSeconds)
	}
	if r.MemoryMB < 256 || r.MemoryMB > 65536 {
		bad("rich.memoryMb", "must be 256 to 65536, got %d", r.MemoryMB)
	}
	if !(r.CPUs >= 0.01 && r.CPUs <= 64) || math.IsNaN(r.CPUs) {
		bad("rich.cpus", "must be 0.01 to 64, got %v", r.CPUs)
	}
	if r.Pids < 8 || r.Pids > 4096 {
		bad("rich.pids", "must be 8 to 4096, got %d", r.Pids)
	}
	if r.TmpfsMB < 1 || r.TmpfsMB > 4096 || r.TmpfsMB >= r.MemoryMB {
		bad("rich.tmpfsMb", "must be 1 to 4096 and below rich.memoryMb (tmpfs counts against memory), got %d", r.TmpfsMB)
	}
	if r.MaxCalls < 1 || r.MaxCalls > policy.MaxRichCalls {
		bad("rich.maxCalls", "must be 1 to %d, got %d", policy.MaxRichCalls, r.MaxCalls)
	}
	if r.ReplyBudgetBytes < richproto.MaxPacketBytes || r.ReplyBudgetBytes > MaxRichReplyBudget {
		bad("rich.replyBudgetBytes", "must be one reply packet at its bound (%d) to %d, got %d", richproto.MaxPacketBytes, int64(MaxRichReplyBudget), r.ReplyBudgetBytes)
	}
	k := r.Compaction
	switch k.Kind {
	case "":
		if len(k.Argv) > 0 || k.URL != "" || k.Credential != "" || k.Engine != "" {
			bad("rich.compaction.kind", "must be exec or http when argv, url, credential or engine is set")
		}
	case policy.CompactorExec:
		if len(k.Argv) == 0 || !filepath.IsAbs(k.Argv[0]) {
			bad("rich.compaction.argv", "argv[0] must be an absolute path")
		}
		if k.URL != "" || k.Credential != "" || k.AllowInsecureLoopbackHTTP {
			bad("rich.compaction", "an exec compactor takes no url, credential or allowInsecureLoopbackHTTP")
		}
	case policy.CompactorHTTP:
		if err := policy.CheckURL(k.URL, k.AllowInsecureLoopbackHTTP); err != nil {
			bad("rich.compaction.url", "%v", err)
		}
		if len(k.Argv) > 0 {
			bad("rich.compaction.argv", "an http compactor takes no argv")
		}
		if k.Credential != "" && !policy.ValidCredentialName(k.Credential) {
			bad("rich.compaction.credential", "must name a credential file")
		}
	default:
		bad("rich.compaction.kind", "must be empty (no compactor), exec or http")
	}
	if k.Kind != "" {
		if !protocol.ValidToolName(k.Engine) {
			bad("rich.compaction.engine", "%q must match %s", k.Engine, protocol.ToolNameRule)
		}
		if k.TimeoutSeconds < 0 || k.TimeoutSeconds > policy.MaxCompactorTimeoutSeconds || 2*k.TimeoutSeconds > r.TurnTimeoutSeconds {
			bad("rich.compaction.timeoutSeconds", "must be 0 (the smaller of 120 s and a third of rich.turnTimeoutSeconds) to half of rich.turnTimeoutSeconds, got %d", k.TimeoutSeconds)
		}
		if k.MaxRequestBytes < 0 || k.MaxRequestBytes > policy.MaxCompactorRequestSize {
			bad("rich.compaction.maxRequestBytes", "must be 0 (32 MiB) to %d, got %d", policy.MaxCompactorRequestSize, k.MaxRequestBytes)
		}
	}

	c.validateSkillsDir("rich.skillsDir", r.SkillsDir, bad)

	if len(c.Profiles) > MaxProfiles {
		bad("profiles", "at most %d profiles", MaxProfiles)
	}
	seen := map[string]bool{}
	for i, p := range c.Profiles {
		key := fmt.Sprintf("profiles[%d]", i)
		if !ValidProfileName(p.Name) {
			bad(key+".name", "%q must match %s", p.Name, profileNameRe)
		} else if seen[p.Name] {
			bad(key+".name", "%q is not unique", p.Name)
		}
		seen[p.Name] = true
		if p.Model == "" || len(p.Model) > protocol.MaxModelChars {
			bad(key+".model", "must be 1 to %d bytes", protocol.MaxModelChars)
		}
		if p.MaxOutputTokens < policy.MinRichOutputTokens || p.MaxOutputTokens > policy.MaxRichOutputTokens {
			bad(key+".maxOutputTokens", "must be %d to %d, got %d", policy.MinRichOutputTokens, policy.MaxRichOutputTokens, p.MaxOutputTokens)
		}
		if !richproto.ValidThinking(p.Thinking) {
			bad(key+".thinking", "must be one of %v, got %q", richproto.ThinkingLevels, p.Thinking)
		}
		if p.Credential != "" && !policy.ValidCredentialName(p.Credential) {
			bad(key+".credential", "must name a credential file")
		}
		c.validateSkillsDir(key+".skillsDir", p.SkillsDir, bad)
		if p.CredentialKind != policy.CredentialAPIKey && p.CredentialKind != policy.CredentialOAuth {
			bad(key+".credentialKind", "must be apiKey or oauth, got %q", p.CredentialKind)
		}
		for j, m := range p.MCP {
			if !slices.ContainsFunc(c.MCP, func(s MCP) bool { return s.Name == m }) || slices.Index(p.MCP, m) != j {
				bad(fmt.Sprintf("%s.mcp[%d]", key, j), "%q must name an entry of mcp, once", m)
			}
		}
		for j, t := range p.Tools {
			if !slices.ContainsFunc(c.Tools, func(s Tool) bool { return s.Name == t }) || slices.Index(p.Tools, t) != j {
				bad(fmt.Sprintf("%s.tools[%d]", key, j), "%q must name an entry of tools, once", t)
			}
		}
	}
	if r.Enabled && len(c.Profiles) == 0 {
		bad("profiles", "rich.enabled needs at least one profile")
	}
}
