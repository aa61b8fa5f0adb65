// Package apiwire holds the request and response bodies of the host API's
// turn, channel, listing and health routes (/v1/channels/..., /v1/turns,
// /v1/health) once, for the host that answers them, the Go client that
// sends them and the CLI (DESIGN.md section 16); the runs' bodies are
// pkg/runs', the delegations' pkg/delegation's, the prechecks' pkg/precheck's.
// Guarantee: these types are the wire: a field's JSON name and omitempty
// are the API's (pinned by golden tests), and nothing here holds behaviour
// beyond encoding; standard library and richproto only.
package apiwire

import "github.com/roundtable-sandbox/sandbox/pkg/richproto"

// Speaker is who spoke. PrincipalID is what the frontend's identity service
// resolved the author to; it selects credentials and reaches host tools but
// never the worker.
type Speaker struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	PrincipalID string `json:"principalId,omitempty"`
}

// TurnRequest is POST /v1/channels/{channel}/turns.
type TurnRequest struct {
	Speaker Speaker `json:"speaker"`
	Text    string  `json:"text"`
	// Attachments: rich channels only (at most 10 URLs the broker fetches
	// through safefetch; refused on a sealed channel).
	Attachments []richproto.Attachment `json:"attachments,omitempty"`
}

// Reply answers a turn; Files are a rich turn's reply files (data is
// base64 in JSON; untrusted names the client checks on receipt).
type Reply struct {
	OK     bool             `json:"ok"`
	Text   string           `json:"text"`
	TurnID string           `json:"turnId"`
	Files  []richproto.File `json:"files,omitempty"`
}

// Channel is a channel's status: GET /v1/channels/{channel} and the answer
// of a mode change or a fresh start.
type Channel struct {
	Channel      string `json:"channel"`
	Tag          string `json:"tag"`
	Mode         string `json:"mode"`
	Queued       int    `json:"queued"`
	RunningTurn  string `json:"runningTurn,omitempty"`
	PendingFresh bool   `json:"pendingFresh"`
	// Standby is the channel's standby: none, preparing or ready ("" when
	// standbys are off); StandbyExpiresUnix its expiry.
	Standby            string `json:"standby,omitempty"`
	StandbyExpiresUnix int64  `json:"standbyExpiresUnix,omitempty"`
	// Profile is a rich channel's profile; Rich its session (mode rich).
	Profile string       `json:"profile,omitempty"`
	Rich    *RichSession `json:"rich,omitempty"`
	// Admission is the host's, shown with one channel's status
	// (GET /v1/channels/{channel}; not in the list).
	Admission *Admission `json:"admission,omitempty"`
}

// Admission is what every channel's turns are admitted under: the global
// concurrency (derived from the machine when queue.globalConcurrency is 0,
// Why says how), the queue wait bound, and what runs and waits now.
type Admission struct {
	GlobalConcurrency int    `json:"globalConcurrency"`
	Derived           bool   `json:"derived"`
	Why               string `json:"why"`
	MaxWaitSeconds    int    `json:"maxWaitSeconds"`
	Running           int    `json:"running"`
	Waiting           int    `json:"waiting"`
	// StartConcurrency bounds how many of those start at once (derived
	// when queue.startConcurrency is 0, StartWhy says how).
	StartConcurrency int    `json:"startConcurrency"`
	StartDerived     bool   `json:"startDerived"`
	StartWhy         string `json:"startWhy"`
	Starting         int    `json:"starting"`
	StartWaiting     int    `json:"startWaiting"`
}

// RichSession is a rich channel's session: its id, container, state (none,
// starting, ready, busy, stopping), start, idle stop and turns served.
type RichSession struct {
	Session      string `json:"session,omitempty"`
	Container    string `json:"container,omitempty"`
	State        string `json:"state"`
	StartedUnix  int64  `json:"startedUnix,omitempty"`
	IdleStopUnix int64  `json:"idleStopUnix,omitempty"`
	Turns        int    `json:"turns,omitempty"`
}

// ChannelList is GET /v1/channels.
type ChannelList struct {
	Channels []Channel `json:"channels"`
}

// ModeRequest is PUT /v1/channels/{channel}/mode.
type ModeRequest struct {
	Mode string `json:"mode"`
	// Profile names a configured profile; required for mode "rich",
	// refused for the others.
	Profile string `json:"profile,omitempty"`
}

// Cancel answers POST /v1/channels/{channel}/cancel.
type Cancel struct {
	Channel   string `json:"channel"`
	Cancelled bool   `json:"cancelled"`
	TurnID    string `json:"turnId,omitempty"`
}

// Turn is one entry of GET /v1/turns: every sandbox of any kind, listed
// from before it writes anything until after everything of it is gone
// (the reaper keeps what is listed).
type Turn struct {
	ID             string `json:"id"`
	ChannelTag     string `json:"channelTag"`
	DeadlineUnix   int64  `json:"deadlineUnix"`
	DeadlineUnixMs int64  `json:"deadlineUnixMs"`
	// Standby is set for a standby not (yet) bound to a turn: its state
	// (preparing, ready, binding, discarding); the deadline is then its
	// expiry.
	Standby string `json:"standby,omitempty"`
	// Run marks a code run (its channel tag is "run-<id>").
	Run bool `json:"run,omitempty"`
	// Job marks a delegated job's research turn (its channel's tag).
	Job bool `json:"job,omitempty"`
	// Precheck marks a precheck script's run (its channel's tag).
	Precheck bool `json:"precheck,omitempty"`
	// Rich marks a rich channel's session (container and broker); the
	// deadline is the session's lifetime.
	Rich bool `json:"rich,omitempty"`
}

// TurnList is GET /v1/turns.
type TurnList struct {
	Turns []Turn `json:"turns"`
}

// Health is GET /v1/health.
type Health struct {
	Status    string `json:"status"`
	Version   string `json:"version"`
	Accepting bool   `json:"accepting"`
	Running   int    `json:"running"`
	Waiting   int    `json:"waiting"`
	// Role is the caller's own role (none, client or admin), from its peer
	// credentials: what `sandbox-host mcp` checks before it serves on a
	// TCP port ("" from a host older than the field).
	Role string `json:"role"`
}

// ErrorResponse is every 4xx/5xx body.
type ErrorResponse struct {
	Error string `json:"error"`
}
