// Package richroute is the rich channel's part of its broker (DESIGN.md
// section 13, policy.Rich): the worker's pull routes and the host's control
// route (channel.go), the Anthropic Messages model route (anthropic.go),
// private tool exchanges (private.go), attachments (attachment.go) and the
// host compactor's routes (compact.go). A sealed turn's broker has none of
// it: pkg/broker makes the Routes only for a rich policy and serves them
// beside its own routes, budgets and credential calls, which it lends them
// through Host.
//
// Guarantees: a credential-bearing call (the model route, host tools, MCP,
// the compactor, attachments) is admitted only inside a turn the host bound
// (the control routes take only the host's SO_PEERCRED uid), and every call
// of a turn ends when the host revokes it; the worker gets a turn only after announcing
// itself, one reply packet a turn within richproto's bounds; a private
// result reaches only a worker that declared both capabilities, else the
// turn fails; answers reflect no credential; errors are generic and log
// lines carry routes, statuses, sizes and counts, never a payload.
package richroute

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// Credentials loads a named credential (credential.Dir).
type Credentials interface {
	Load(name string) (credential.Secret, error)
}

// Host is what the rich routes need of the turn's broker (pkg/broker):
// its one error table, its budgets and its credentials.
type Host interface {
	// Status maps an error to its HTTP status and generic public text.
	Status(err error) (int, string)
	// Interrupted names who ended a failed call (the broker stopping, the
	// caller leaving) instead of the upstream it cancelled; else err.
	Interrupted(r *http.Request, err error) error
	// RefusalsSpent reports the turn's refusal budget spent; Refusal
	// counts one refused request against it.
	RefusalsSpent() bool
	Refusal()
	// Unread counts a request refused without a line of its own (logged
	// once, when the broker stops).
	Unread()
	// CallsLeft is max less the turn's calls; TakeCall counts one call
	// unless max were made (then false).
	CallsLeft(max int) int
	TakeCall(max int) bool
	// NewTurn gives a bound turn budgets of its own (calls, refusals).
	NewTurn()
	// LoadCredential reads a named credential now (rotation works); a
	// missing or empty one fails (credential.ErrMissing, ErrInvalid).
	LoadCredential(name string) (credential.Secret, error)
	// Secrets adds every credential the policy names to call's: what no
	// answer may reflect.
	Secrets(call []credential.Secret) []credential.Secret
}

// Config is what the rich routes are made of.
type Config struct {
	Policy      *policy.Policy // with Rich set
	Credentials Credentials
	Logger      *slog.Logger
	Now         func() time.Time
	// Fetcher fetches attachments (the broker's one vetted dialer).
	Fetcher *safefetch.Fetcher
	// ControlUID is the only peer uid the control routes accept.
	ControlUID int
	// MaxLogged refused pull and control requests are logged one by one
	// (the broker's MaxRefusals), the rest counted (Host.Unread).
	MaxLogged int
	// PollWait replaces PollWait, Silence AnthropicSilence (tests).
	PollWait, Silence time.Duration
}

// Routes are a rich broker's own routes and their state.
type Routes struct {
	pol       *policy.Policy
	creds     Credentials
	log       *slog.Logger
	now       func() time.Time
	fetcher   *safefetch.Fetcher
	host      Host
	maxLogged int
	// rich is the pull and bind state (channel.go), anth the model
	// route's (anthropic.go).
	rich *richState
	anth *anthropicState
}

// New makes the rich routes of cfg.Policy, lent host's budgets.
func New(cfg Config, host Host) *Routes {
	return &Routes{
		pol: cfg.Policy, creds: cfg.Credentials, log: cfg.Logger, now: cfg.Now, fetcher: cfg.Fetcher,
		host: host, maxLogged: cfg.MaxLogged,
		rich: newRichState(cfg.Now(), cfg.ControlUID, cfg.PollWait),
		anth: newAnthropicState(cfg.Silence),
	}
}

// Serve answers the rich routes (pull, control, compactor, attachment,
// then the model route); false for any other request, which the broker's
// own route checks then meet.
func (b *Routes) Serve(w http.ResponseWriter, r *http.Request) bool {
	return b.serveRich(w, r) || b.serveAnthropic(w, r)
}

func refused(msg string, category error) error { return envelope.Refused(msg, category) }
