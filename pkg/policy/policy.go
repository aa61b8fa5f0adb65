// Package policy is the contract between the host and one turn's broker: the
// file /run/roundtable-sandbox/policies/<turn>.json that binds the turn's
// identity, deadline, routes, limits and credential names. It never holds a
// credential value. A policy that Load returns has passed Validate.
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Version of the policy file format.
const Version = 1

// MaxBytes bounds a policy file.
const MaxBytes = 1 << 20

// ErrInvalid is the category of every policy validation failure.
var ErrInvalid = errors.New("invalid policy")

// Identity is bound by the host from the admitted turn; the broker gives it to
// host tools and nothing a guest sends can change it.
type Identity struct {
	Channel     string `json:"channel"`
	ChannelTag  string `json:"channelTag"`
	SpeakerID   string `json:"speakerId"`
	SpeakerName string `json:"speakerName"`
	PrincipalID string `json:"principalId"`
}

// Model is the fixed upstream of /model.
type Model struct {
	URL        string `json:"url"`
	Name       string `json:"name"`
	MaxTokens  int    `json:"maxTokens"`
	Credential string `json:"credential"` // credential name, never a value
	// AllowHTTP permits a plain-http loopback URL; only test configurations set it.
	AllowHTTP bool `json:"allowHttp,omitempty"`
}

// Tool kinds.
const (
	KindBuiltin = "builtin"
	KindExec    = "exec"
	KindHTTP    = "http"
	KindFetch   = "fetch"
)

// Bounds of a fetch tool (the safefetch ranges; the text bound keeps the
// answer well inside the broker's response limit).
const (
	MaxFetchTimeoutMs     = 120_000
	MaxFetchBytes         = 32 << 20
	MaxFetchTextBytes     = 256 << 10
	DefaultFetchBytes     = 5 << 20
	DefaultFetchTextBytes = 16 << 10
)

// Tool is one allow-listed host tool, reached at /tools/<name>.
type Tool struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	Builtin   string   `json:"builtin,omitempty"` // kind builtin: e.g. "clock"
	Argv      []string `json:"argv,omitempty"`    // kind exec: absolute argv[0]
	URL       string   `json:"url,omitempty"`     // kind http: trusted https URL
	TimeoutMs int      `json:"timeoutMs,omitempty"`
	// Credential optionally names a bearer credential for kind http.
	Credential string `json:"credential,omitempty"`
	AllowHTTP  bool   `json:"allowHttp,omitempty"`
	// Kind fetch: the body bound (wire and decoded) and the answer's text
	// bound, 0 meaning DefaultFetchBytes and DefaultFetchTextBytes.
	MaxBytes     int64 `json:"maxBytes,omitempty"`
	MaxTextBytes int   `json:"maxTextBytes,omitempty"`
}

// MCP session modes.
const (
	SessionAuto      = "auto"
	SessionStateless = "stateless"
)

// MCPServer is one allow-listed MCP server, reached at /mcp/<name>.
type MCPServer struct {
	Name       string   `json:"name"`
	URL        string   `json:"url"`
	Credential string   `json:"credential,omitempty"` // optional bearer credential name
	Session    string   `json:"session"`              // auto | stateless
	Tools      []string `json:"tools"`                // declared tool names
	AllowHTTP  bool     `json:"allowHttp,omitempty"`
}

// Limits are the broker's bounds for this turn.
type Limits struct {
	MaxCalls          int   `json:"maxCalls"`          // 48
	MaxRequestBytes   int64 `json:"maxRequestBytes"`   // 256 KiB
	MaxResponseBytes  int64 `json:"maxResponseBytes"`  // 1 MiB
	UpstreamTimeoutMs int   `json:"upstreamTimeoutMs"` // 60 s
	MaxConnections    int   `json:"maxConnections"`    // 16
	HeaderTimeoutMs   int   `json:"headerTimeoutMs"`   // 10 s
	RequestTimeoutMs  int   `json:"requestTimeoutMs"`  // 60 s
}

// DefaultLimits are the seeds' defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxCalls:          48,
		MaxRequestBytes:   256 << 10,
		MaxResponseBytes:  1 << 20,
		UpstreamTimeoutMs: 60_000,
		MaxConnections:    16,
		HeaderTimeoutMs:   10_000,
		RequestTimeoutMs:  60_000,
	}
}

// DefaultMaxTokens is the output-token limit when none is configured.
const DefaultMaxTokens = 4096

// Policy is one turn's broker policy.
type Policy struct {
	Version        int         `json:"version"`
	TurnID         string      `json:"turnId"`
	Identity       Identity    `json:"identity"`
	DeadlineUnixMs int64       `json:"deadlineUnixMs"`
	Model          Model       `json:"model"`
	Tools          []Tool      `json:"tools"`
	MCP            []MCPServer `json:"mcp"`
	Limits         Limits      `json:"limits"`
	// EgressAllow lists exact private "address:port" destinations a fetch
	// may reach (the operator's egress.allow); empty by default.
	EgressAllow []string `json:"egressAllow,omitempty"`
	// Egress grants the proxy route (DESIGN.md section 11, package egress)
	// with its bounds; nil, the default, means no route: a CONNECT or
	// absolute-form request is refused like any other unknown request.
	Egress *Egress `json:"egress,omitempty"`
	// EgressOnly marks a code run's policy (DESIGN.md section 12): the
	// proxy route and nothing else. It has no model, tools, MCP servers or
	// credentials, and its broker refuses every other request.
	EgressOnly bool `json:"egressOnly,omitempty"`
	// Precheck marks a precheck script's policy (DESIGN.md section 14): the
	// MCP servers with exactly the tools granted with the script and
	// nothing else. It has no model route and no model credential, no host
	// tools and no egress; its broker refuses /model like an unknown route.
	Precheck bool `json:"precheck,omitempty"`
	// Rich marks a rich channel's long-lived broker (rich.go): the
	// Anthropic Messages route instead of /model, the pull routes and the
	// per-turn bind; nil for every other policy.
	Rich *Rich `json:"rich,omitempty"`
	// Grants marks a session's long-lived broker (grant.go): the proxy
	// route only while the host has bound an exec's Grant; nil for every
	// other policy.
	Grants *Grants `json:"grants,omitempty"`
}

// Egress is a grant of the proxy route and its per-turn (per-run) bounds.
// Every field is required and bounded; the turn deadline ends every
// connection as well.
type Egress struct {
	// MaxConnections bounds the destination connections open at once; it
	// must stay below limits.maxConnections, which also counts the socket
	// connections that carry them and the worker's own.
	MaxConnections int `json:"maxConnections"`
	// MaxBytesOut and MaxBytesIn bound the bytes sent to and received from
	// destinations over the whole turn, all connections together.
	MaxBytesOut int64 `json:"maxBytesOut"`
	MaxBytesIn  int64 `json:"maxBytesIn"`
	// ConnectionTimeoutMs bounds each destination connection's lifetime.
	ConnectionTimeoutMs int `json:"connectionTimeoutMs"`
	// Credentials are the credentialed destinations this run was approved
	// to carry (credegress.go); none by default.
	Credentials []EgressCredential `json:"credentials,omitempty"`
	// TestRootCA is PEM text of a root CA the broker trusts besides the
	// system's, only for credentialed destinations that are loopback IP
	// literals (tests: egress.testRootCAFile); "" in every real policy.
	TestRootCA string `json:"testRootCA,omitempty"`
}

// Bounds of an egress grant.
const (
	MaxEgressConnections = 64
	MaxEgressBytes       = 4 << 30
	MinEgressTimeoutMs   = 1_000
	MaxEgressTimeoutMs   = 3_600_000
)

// DefaultEgress is the grant an approved run gets unless its operator sets
// other bounds: 8 connections, 64 MiB out, 1 GiB in, 10 minutes each.
func DefaultEgress() Egress {
	return Egress{MaxConnections: 8, MaxBytesOut: 64 << 20, MaxBytesIn: 1 << 30, ConnectionTimeoutMs: 600_000}
}

// Validate checks a grant against its bounds and the turn's connection limit.
func (e Egress) Validate(l Limits) error {
	switch {
	case e.MaxConnections < 1 || e.MaxConnections > MaxEgressConnections:
		return bad("egress.maxConnections must be 1 to %d", MaxEgressConnections)
	case e.MaxConnections >= l.MaxConnections:
		return bad("egress.maxConnections must be below limits.maxConnections")
	case e.MaxBytesOut < 1 || e.MaxBytesOut > MaxEgressBytes:
		return bad("egress.maxBytesOut must be 1 to %d", int64(MaxEgressBytes))
	case e.MaxBytesIn < 1 || e.MaxBytesIn > MaxEgressBytes:
		return bad("egress.maxBytesIn must be 1 to %d", int64(MaxEgressBytes))
	case e.ConnectionTimeoutMs < MinEgressTimeoutMs || e.ConnectionTimeoutMs > MaxEgressTimeoutMs:
		return bad("egress.connectionTimeoutMs must be %d to %d", MinEgressTimeoutMs, MaxEgressTimeoutMs)
	}
	return e.validateCredentials()
}

// Deadline is the turn deadline as a time.
func (p *Policy) Deadline() time.Time { return time.UnixMilli(p.DeadlineUnixMs) }

// LogValue keeps identity text and URLs out of logs: only the turn id and tag.
func (p *Policy) LogValue() slog.Value {
	return slog.GroupValue(slog.String("turn", p.TurnID), slog.String("channel", p.Identity.ChannelTag))
}

// Tool returns the named host tool.
func (p *Policy) Tool(name string) (Tool, bool) {
	for _, t := range p.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Server returns the named MCP server.
func (p *Policy) Server(name string) (MCPServer, bool) {
	for _, s := range p.MCP {
		if s.Name == name {
			return s, true
		}
	}
	return MCPServer{}, false
}

func bad(format string, a ...any) error {
	return fmt.Errorf("policy: "+format+": %w", append(a, ErrInvalid)...)
}

// CheckURL accepts https URLs, or http to a loopback host when allowHTTP is set.
// No userinfo, no fragment.
func CheckURL(raw string, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return errors.New("must be an absolute URL without credentials or fragment")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if !allowHTTP {
			return errors.New("must use https")
		}
		h := u.Hostname()
		if h != "localhost" && h != "127.0.0.1" && h != "::1" {
			return errors.New("plain http is allowed only to a loopback host")
		}
		return nil
	}
	return errors.New("must use https")
}

func validCredName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return s[0] != '.'
}

// ValidCredentialName reports whether s may name a credential file.
func ValidCredentialName(s string) bool { return validCredName(s) }

// Validate checks every field.
func (p *Policy) Validate() error {
	if p.Version != Version {
		return bad("version must be %d", Version)
	}
	if err := ids.ValidTurnID(p.TurnID); err != nil {
		return bad("turnId: %v", err)
	}
	if err := ids.ValidName(p.Identity.Channel); err != nil { // a run's is run-<id>
		return bad("identity.channel: %v", err)
	}
	if p.Identity.ChannelTag != ids.ChannelTag(p.Identity.Channel) {
		return bad("identity.channelTag does not match the channel")
	}
	for _, f := range []string{p.Identity.SpeakerID, p.Identity.SpeakerName, p.Identity.PrincipalID} {
		if len([]rune(f)) > protocol.MaxIDChars {
			return bad("identity fields must be at most %d characters", protocol.MaxIDChars)
		}
	}
	if p.DeadlineUnixMs <= 0 {
		return bad("deadlineUnixMs must be set")
	}
	if p.Grants != nil {
		if p.Rich != nil {
			return bad("a grants policy is not a rich one")
		}
		return p.validateGrants()
	}
	if p.Rich != nil {
		if err := p.validateRich(); err != nil {
			return err
		}
		if err := p.validateTools(); err != nil {
			return err
		}
		if err := p.validateMCP(); err != nil {
			return err
		}
		return p.validateLimitsAndEgress()
	}
	if p.Precheck {
		if p.EgressOnly || p.Egress != nil || p.Model != (Model{}) || len(p.Tools) > 0 || len(p.EgressAllow) > 0 {
			return bad("a precheck policy has MCP servers only: no model, credential, tools or egress")
		}
		if err := p.validateMCP(); err != nil {
			return err
		}
		return p.validateLimitsAndEgress()
	}
	if p.EgressOnly {
		if p.Egress == nil || p.Model != (Model{}) || len(p.Tools) > 0 || len(p.MCP) > 0 {
			return bad("an egressOnly policy has an egress grant and no model, tools or MCP servers")
		}
		if err := p.validateLimitsAndEgress(); err != nil {
			return err
		}
		return nil
	}
	if err := CheckURL(p.Model.URL, p.Model.AllowHTTP); err != nil {
		return bad("model.url %v", err)
	}
	if p.Model.Name == "" || len(p.Model.Name) > protocol.MaxModelChars {
		return bad("model.name must be 1 to %d bytes", protocol.MaxModelChars)
	}
	if p.Model.MaxTokens < 1 || p.Model.MaxTokens > 1_000_000 {
		return bad("model.maxTokens must be 1 to 1000000")
	}
	if !validCredName(p.Model.Credential) {
		return bad("model.credential must name a credential")
	}
	if err := p.validateTools(); err != nil {
		return err
	}
	for _, a := range p.EgressAllow {
		if ap, err := netip.ParseAddrPort(a); err != nil || ap.Port() == 0 || ap.String() != a {
			return bad("egressAllow entries must be canonical address:port")
		}
	}
	if err := p.validateMCP(); err != nil {
		return err
	}
	return p.validateLimitsAndEgress()
}

// validateTools checks the host tools.
func (p *Policy) validateTools() error {
	seen := map[string]bool{}
	for _, t := range p.Tools {
		if !protocol.ValidToolName(t.Name) || seen[t.Name] {
			return bad("tool names must be unique and match %s", protocol.ToolNameRule)
		}
		seen[t.Name] = true
		if t.TimeoutMs < 0 || t.TimeoutMs > 600_000 {
			return bad("tool %s timeoutMs must be 0 to 600000", t.Name)
		}
		if t.Credential != "" && !validCredName(t.Credential) {
			return bad("tool %s credential name invalid", t.Name)
		}
		switch t.Kind {
		case KindBuiltin:
			if t.Builtin != "clock" {
				return bad("tool %s: unknown builtin", t.Name)
			}
		case KindExec:
			if len(t.Argv) == 0 || len(t.Argv[0]) == 0 || t.Argv[0][0] != '/' {
				return bad("tool %s: exec argv[0] must be an absolute path", t.Name)
			}
		case KindHTTP:
			if err := CheckURL(t.URL, t.AllowHTTP); err != nil {
				return bad("tool %s url %v", t.Name, err)
			}
		case KindFetch:
			if t.URL != "" || len(t.Argv) > 0 || t.Builtin != "" || t.Credential != "" || t.AllowHTTP {
				return bad("tool %s: a fetch tool takes no url, argv, builtin or credential", t.Name)
			}
			if t.TimeoutMs > MaxFetchTimeoutMs || t.MaxBytes < 0 || t.MaxBytes > MaxFetchBytes ||
				t.MaxTextBytes < 0 || t.MaxTextBytes > MaxFetchTextBytes {
				return bad("tool %s: fetch bounds out of range", t.Name)
			}
		default:
			return bad("tool %s: kind must be builtin, exec, http or fetch", t.Name)
		}
		if t.Kind != KindFetch && (t.MaxBytes != 0 || t.MaxTextBytes != 0) {
			return bad("tool %s: maxBytes and maxTextBytes are for fetch tools", t.Name)
		}
	}
	return nil
}

// validateMCP checks the MCP servers.
func (p *Policy) validateMCP() error {
	seen := map[string]bool{}
	for _, s := range p.MCP {
		if !protocol.ValidToolName(s.Name) || seen[s.Name] {
			return bad("MCP server names must be unique and match %s", protocol.ToolNameRule)
		}
		seen[s.Name] = true
		if err := CheckURL(s.URL, s.AllowHTTP); err != nil {
			return bad("mcp %s url %v", s.Name, err)
		}
		if s.Credential != "" && !validCredName(s.Credential) {
			return bad("mcp %s credential name invalid", s.Name)
		}
		if s.Session != SessionAuto && s.Session != SessionStateless {
			return bad("mcp %s session must be auto or stateless", s.Name)
		}
		if len(s.Tools) == 0 {
			return bad("mcp %s declares no tools", s.Name)
		}
		tools := map[string]bool{}
		for _, name := range s.Tools {
			if !protocol.ValidMCPToolName(name) || tools[name] {
				return bad("mcp %s tool names must be unique and be %s", s.Name, protocol.MCPToolNameRule)
			}
			tools[name] = true
		}
	}
	return nil
}

// validateLimitsAndEgress checks the limits and the egress grant.
func (p *Policy) validateLimitsAndEgress() error {
	for _, a := range p.EgressAllow {
		if ap, err := netip.ParseAddrPort(a); err != nil || ap.Port() == 0 || ap.String() != a {
			return bad("egressAllow entries must be canonical address:port")
		}
	}
	l := p.Limits
	switch {
	case l.MaxCalls < 1 || l.MaxCalls > 1000:
		return bad("limits.maxCalls must be 1 to 1000")
	case l.MaxRequestBytes < 1024 || l.MaxRequestBytes > 16<<20:
		return bad("limits.maxRequestBytes must be 1 KiB to 16 MiB")
	case l.MaxResponseBytes < 1024 || l.MaxResponseBytes > 64<<20:
		return bad("limits.maxResponseBytes must be 1 KiB to 64 MiB")
	case l.UpstreamTimeoutMs < 100 || l.UpstreamTimeoutMs > 600_000:
		return bad("limits.upstreamTimeoutMs must be 100 to 600000")
	case l.MaxConnections < 1 || l.MaxConnections > 1024:
		return bad("limits.maxConnections must be 1 to 1024")
	case l.HeaderTimeoutMs < 100 || l.HeaderTimeoutMs > 600_000:
		return bad("limits.headerTimeoutMs must be 100 to 600000")
	case l.RequestTimeoutMs < 100 || l.RequestTimeoutMs > 600_000:
		return bad("limits.requestTimeoutMs must be 100 to 600000")
	}
	if p.Egress != nil {
		if (len(p.Egress.Credentials) > 0 || p.Egress.TestRootCA != "") && !p.EgressOnly {
			return bad("egress.credentials and egress.testRootCA are for a code run's (egressOnly) policy only")
		}
		return p.Egress.Validate(l)
	}
	return nil
}

// Load reads, strictly decodes and validates a policy file.
func Load(path string) (*Policy, error) {
	data, err := atomicfile.ReadFile(path, MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("policy: read: %w", err)
	}
	return decode(data)
}

// decode strictly decodes and validates a full policy.
func decode(data []byte) (*Policy, error) {
	var p Policy
	if err := protocol.DecodeStrict(data, &p); err != nil {
		return nil, bad("%v", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Marshal validates and encodes a policy.
func (p *Policy) Marshal() ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(p)
}
