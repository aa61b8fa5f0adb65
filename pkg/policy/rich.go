package policy

import (
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// Rich marks a rich channel's long-lived broker policy (DESIGN.md section
// 13): its TurnID is the channel-session id (32 hex, one per start of the
// channel's broker), its Identity names the channel only (the speaker is
// bound per turn over the host-only control path, see Bind), its deadline
// is the session's lifetime bound, and its routes are the Anthropic
// Messages route (/anthropic/...), the host tools, the MCP servers, the
// compactor (/compact) and the worker's pull routes (/worker/...). A rich
// policy has no /model (Model is empty) and no egress.
type Rich struct {
	// URL is the trusted Anthropic API base (https; plain-http loopback only
	// with AllowHTTP, for tests), e.g. https://api.anthropic.com.
	URL       string `json:"url"`
	AllowHTTP bool   `json:"allowHttp,omitempty"`
	// Model is the fixed model every request is rebuilt with.
	Model string `json:"model"`
	// MaxOutputTokens clamps max_tokens of every model call.
	MaxOutputTokens int `json:"maxOutputTokens"`
	// Thinking is the profile's ceiling (a richproto.ThinkingLevels value);
	// a turn's level (richproto.Turn.Thinking) is at most this.
	Thinking string `json:"thinking"`
	// Credential names the model credential; CredentialKind says how the
	// broker presents it upstream: x-api-key (apiKey) or a bearer (oauth).
	Credential     string `json:"credential"`
	CredentialKind string `json:"credentialKind"`
	// MaxCalls bounds the credential-bearing calls (model, tools, MCP) of
	// one turn (the seed's default 128, 1..1000).
	MaxCalls int `json:"maxCalls"`
	// Compactor is the operator's host-side compactor, or nil for none (the
	// worker's own summary only).
	Compactor *Compactor `json:"compactor,omitempty"`
}

// Credential kinds of a rich model credential.
const (
	CredentialAPIKey = "apiKey"
	CredentialOAuth  = "oauth"
)

// Compactor kinds.
const (
	CompactorExec = "exec"
	CompactorHTTP = "http"
)

// Bounds of a rich policy (the seed's rich mode).
const (
	MinRichOutputTokens     = 1025
	MaxRichOutputTokens     = 200_000
	DefaultRichOutputTokens = 128_000
	DefaultRichMaxCalls     = 128
	MaxRichCalls            = 1000
	// MaxCompactorTimeoutSeconds: the compactor may take at most half the
	// longest turn (600 s) so the worker's own summary keeps time to run.
	MaxCompactorTimeoutSeconds  = 300
	DefaultCompactorRequestSize = 32 << 20
	MaxCompactorRequestSize     = 96 << 20
	// The metadata-only startup scope before the first bind: MCP
	// initialize/list only, for at most this long and this many calls.
	StartupScopeDuration = 90 * time.Second
	StartupScopeCalls    = 32
)

// Compactor is the operator's host-side compactor run by the channel
// broker for POST /compact.
type Compactor struct {
	Kind string   `json:"kind"`           // exec | http
	Argv []string `json:"argv,omitempty"` // kind exec: absolute argv[0]
	URL  string   `json:"url,omitempty"`  // kind http: trusted https URL
	// Credential optionally names a bearer credential for kind http.
	Credential string `json:"credential,omitempty"`
	AllowHTTP  bool   `json:"allowHttp,omitempty"`
	// TimeoutSeconds is the operator's bound (1..300, 0 = the default: the
	// smaller of 120 s and a third of the turn timeout); the broker also
	// never gives it more than half the time the turn has left.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// MaxRequestBytes bounds the request sent to it (0 = 32 MiB).
	MaxRequestBytes int64 `json:"maxRequestBytes,omitempty"`
	// Engine is recorded as details.engine of its compactions.
	Engine string `json:"engine"`
}

// Validate checks a compactor.
func (c *Compactor) Validate() error {
	switch c.Kind {
	case CompactorExec:
		if len(c.Argv) == 0 || len(c.Argv[0]) == 0 || c.Argv[0][0] != '/' || c.URL != "" || c.Credential != "" || c.AllowHTTP {
			return bad("rich.compactor: exec needs an absolute argv[0] and no url or credential")
		}
	case CompactorHTTP:
		if len(c.Argv) > 0 {
			return bad("rich.compactor: http takes no argv")
		}
		if err := CheckURL(c.URL, c.AllowHTTP); err != nil {
			return bad("rich.compactor.url %v", err)
		}
		if c.Credential != "" && !validCredName(c.Credential) {
			return bad("rich.compactor.credential name invalid")
		}
	default:
		return bad("rich.compactor.kind must be exec or http")
	}
	if c.TimeoutSeconds < 0 || c.TimeoutSeconds > MaxCompactorTimeoutSeconds {
		return bad("rich.compactor.timeoutSeconds must be 0 to %d", MaxCompactorTimeoutSeconds)
	}
	if c.MaxRequestBytes < 0 || c.MaxRequestBytes > MaxCompactorRequestSize {
		return bad("rich.compactor.maxRequestBytes must be 0 to %d", MaxCompactorRequestSize)
	}
	if c.Engine == "" || len(c.Engine) > 64 || !protocol.ValidToolName(c.Engine) {
		return bad("rich.compactor.engine must match %s", protocol.ToolNameRule)
	}
	return nil
}

// RequestBytes is the effective request bound.
func (c *Compactor) RequestBytes() int64 {
	if c.MaxRequestBytes == 0 {
		return DefaultCompactorRequestSize
	}
	return c.MaxRequestBytes
}

// Timeout is the operator's effective bound for a turn timeout of turn:
// TimeoutSeconds, else the smaller of 120 s and a third of turn.
func (c *Compactor) Timeout(turn time.Duration) time.Duration {
	if c.TimeoutSeconds > 0 {
		return time.Duration(c.TimeoutSeconds) * time.Second
	}
	return min(120*time.Second, turn/3)
}

// Validate checks a rich section.
func (r *Rich) Validate() error {
	if err := CheckURL(r.URL, r.AllowHTTP); err != nil {
		return bad("rich.url %v", err)
	}
	if r.Model == "" || len(r.Model) > protocol.MaxModelChars {
		return bad("rich.model must be 1 to %d bytes", protocol.MaxModelChars)
	}
	if r.MaxOutputTokens < MinRichOutputTokens || r.MaxOutputTokens > MaxRichOutputTokens {
		return bad("rich.maxOutputTokens must be %d to %d", MinRichOutputTokens, MaxRichOutputTokens)
	}
	if !richproto.ValidThinking(r.Thinking) {
		return bad("rich.thinking must be one of %v", richproto.ThinkingLevels)
	}
	if !validCredName(r.Credential) {
		return bad("rich.credential must name a credential")
	}
	if r.CredentialKind != CredentialAPIKey && r.CredentialKind != CredentialOAuth {
		return bad("rich.credentialKind must be apiKey or oauth")
	}
	if r.MaxCalls < 1 || r.MaxCalls > MaxRichCalls {
		return bad("rich.maxCalls must be 1 to %d", MaxRichCalls)
	}
	if r.Compactor != nil {
		return r.Compactor.Validate()
	}
	return nil
}

// ThinkingRank orders thinking levels (off 0 .. xhigh 4); -1 for unknown.
func ThinkingRank(level string) int {
	for i, l := range richproto.ThinkingLevels {
		if l == level {
			return i
		}
	}
	return -1
}

// Routes of a rich channel broker's host-only control path: the broker
// answers them only on connections whose peer uid (SO_PEERCRED) owns its
// policy file, the host's.
const (
	// RouteControlTurn takes a Bind and answers the worker's reply packet
	// (a richproto.Result); the bind is revoked when the request ends.
	RouteControlTurn = "/control/turn"
	// RouteControlStatus answers a ControlStatus (no body).
	RouteControlStatus = "/control/status"
)

// ControlStatus is whether the worker announced itself (POST
// /worker/ready), waits in a long poll, and whether a turn is bound.
type ControlStatus struct {
	Ready   bool `json:"ready"`
	Polling bool `json:"polling"`
	Bound   bool `json:"bound"`
}

// Bind is what the host hands a rich channel broker over its host-only
// control path right before it admits a turn: the turn (as the worker will
// get it from /worker/next) and the identity host tools receive. The
// broker holds it until the host revokes it (the turn settled) or the
// turn's deadline passes; credential-bearing calls outside a bound turn are
// refused.
type Bind struct {
	Turn     richproto.Turn `json:"turn"`
	Identity Identity       `json:"identity"`
}

// Validate checks a bind against its channel's rich policy.
func (b *Bind) Validate(p *Policy) error {
	if p.Rich == nil {
		return bad("bind: not a rich policy")
	}
	if err := b.Turn.Validate(); err != nil {
		return bad("bind: %v", err)
	}
	if b.Identity.Channel != p.Identity.Channel || b.Identity.ChannelTag != p.Identity.ChannelTag {
		return bad("bind: identity names another channel")
	}
	for _, f := range []string{b.Identity.SpeakerID, b.Identity.SpeakerName, b.Identity.PrincipalID} {
		if len([]rune(f)) > protocol.MaxIDChars {
			return bad("bind: identity fields must be at most %d characters", protocol.MaxIDChars)
		}
	}
	if ThinkingRank(b.Turn.Thinking) > ThinkingRank(p.Rich.Thinking) {
		return bad("bind: thinking above the profile's ceiling")
	}
	if b.Turn.DeadlineUnixMs > p.DeadlineUnixMs {
		return bad("bind: turn deadline past the session's")
	}
	return nil
}

// validateRich checks the parts of a rich policy beside its section.
func (p *Policy) validateRich() error {
	// egressAllow stays: the broker fetches the turn's attachments through it.
	if p.EgressOnly || p.Precheck || p.Egress != nil || p.Model != (Model{}) {
		return bad("a rich policy has no model route (its model is rich.model), no egress grant and is neither egressOnly nor precheck")
	}
	if err := p.Rich.Validate(); err != nil {
		return err
	}
	return nil
}
