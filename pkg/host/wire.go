package host

import (
	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// MaxBodyBytes bounds every request body: 32,000 characters of text escaped
// as JSON (up to 6 bytes each) plus the speaker fields fit.
const MaxBodyBytes = api.MaxBodyBytes

// MaxRichBodyBytes bounds a rich channel's turn request: 100,000
// characters of text escaped as JSON plus the speaker fields and ten
// attachments (URL, name and type, escaped).
const MaxRichBodyBytes = 800 << 10

// Wire types of the API (pkg/client mirrors them).
type (
	// SpeakerJSON is who spoke; principalId never reaches the worker.
	SpeakerJSON struct {
		ID          string `json:"id"`
		Name        string `json:"name"`
		PrincipalID string `json:"principalId,omitempty"`
	}
	// TurnRequest is POST /v1/channels/{channel}/turns.
	TurnRequest struct {
		Speaker SpeakerJSON `json:"speaker"`
		Text    string      `json:"text"`
		// Attachments: rich channels only (at most 10 URLs the broker
		// fetches through safefetch; refused on a sealed channel).
		Attachments []richproto.Attachment `json:"attachments,omitempty"`
	}
	// TurnResponse answers a turn; Files are a rich turn's reply files
	// (data is base64 in JSON).
	TurnResponse struct {
		OK     bool             `json:"ok"`
		Text   string           `json:"text"`
		TurnID string           `json:"turnId"`
		Files  []richproto.File `json:"files,omitempty"`
	}
	// ChannelStatus is GET /v1/channels/{channel}.
	ChannelStatus struct {
		Channel      string `json:"channel"`
		Tag          string `json:"tag"`
		Mode         string `json:"mode"`
		Queued       int    `json:"queued"`
		RunningTurn  string `json:"runningTurn,omitempty"`
		PendingFresh bool   `json:"pendingFresh"`
		// Standby is the channel's standby: none, preparing or ready
		// ("" when standbys are off); StandbyExpiresUnix its expiry.
		Standby            string `json:"standby,omitempty"`
		StandbyExpiresUnix int64  `json:"standbyExpiresUnix,omitempty"`
		// Profile is a rich channel's profile; Rich its session (mode rich).
		Profile string              `json:"profile,omitempty"`
		Rich    *richsession.Status `json:"rich,omitempty"`
		// Admission is the host's, shown with one channel's status
		// (GET /v1/channels/{channel}; not in the list).
		Admission *AdmissionStatus `json:"admission,omitempty"`
	}
	// AdmissionStatus is what every channel's turns are admitted under.
	AdmissionStatus struct {
		// GlobalConcurrency is the cap on what runs at once across
		// channels; Derived when queue.globalConcurrency is 0, Why how.
		GlobalConcurrency int    `json:"globalConcurrency"`
		Derived           bool   `json:"derived"`
		Why               string `json:"why"`
		MaxWaitSeconds    int    `json:"maxWaitSeconds"`
		Running           int    `json:"running"`
		Waiting           int    `json:"waiting"`
		// StartConcurrency bounds starts at once (queue.startConcurrency).
		StartConcurrency int    `json:"startConcurrency"`
		StartDerived     bool   `json:"startDerived"`
		StartWhy         string `json:"startWhy"`
		Starting         int    `json:"starting"`
		StartWaiting     int    `json:"startWaiting"`
	}
	// ChannelList is GET /v1/channels.
	ChannelList struct {
		Channels []ChannelStatus `json:"channels"`
	}
	// ModeRequest is PUT /v1/channels/{channel}/mode.
	ModeRequest struct {
		Mode string `json:"mode"`
		// Profile names a configured profile; required for mode "rich",
		// refused for the others.
		Profile string `json:"profile,omitempty"`
	}
	// CancelResponse answers POST /v1/channels/{channel}/cancel.
	CancelResponse struct {
		Channel   string `json:"channel"`
		Cancelled bool   `json:"cancelled"`
		TurnID    string `json:"turnId,omitempty"`
	}
	// ActiveTurn is one entry of GET /v1/turns (sandbox.Listed).
	ActiveTurn = sandbox.Listed
	// TurnList is GET /v1/turns.
	TurnList struct {
		Turns []ActiveTurn `json:"turns"`
	}
	// Health is GET /v1/health.
	Health struct {
		Status    string `json:"status"`
		Version   string `json:"version"`
		Accepting bool   `json:"accepting"`
		Running   int    `json:"running"`
		Waiting   int    `json:"waiting"`
		// Role is the caller's own role (none, client or admin), from its
		// peer credentials: what `sandbox-host mcp` checks before it
		// serves on a TCP port.
		Role string `json:"role"`
	}
	// ErrorResponse is every 4xx/5xx body.
	ErrorResponse struct {
		Error string `json:"error"`
	}
)

// Modes are the values of PUT /v1/channels/{channel}/mode's "mode".
var Modes = []string{ModeOn, ModeOff, ModeRich}
