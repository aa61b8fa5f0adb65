package precheck

// Request is POST /v1/prechecks: one script run for one channel's schedule.
type Request struct {
	Channel string `json:"channel"`
	// Target is the schedule's declared target (bounded, never handed to
	// the script or logged).
	Target string `json:"target,omitempty"`
	Script string `json:"script"`
	// FiredAt is the firing time, RFC 3339; the host's clock when empty.
	FiredAt string `json:"firedAt,omitempty"`
	// TimeZone is an IANA zone name; the host's timeZone when empty.
	TimeZone string `json:"timeZone,omitempty"`
	Schedule string `json:"schedule,omitempty"`
	// Grants are the MCP tools approved with the script; each must be
	// allowed for the channel by the operator (prechecks.grants).
	Grants []Grant `json:"grants,omitempty"`
}

// Grant is one MCP tool a script may call.
type Grant struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
}

// Answer is the API's answer: {wake, note?} or {wake, context}, or {error}
// (a script that failed or passed its time: the seed wakes the scheduled
// turn with that error).
type Answer struct {
	Wake    *bool  `json:"wake,omitempty"`
	Note    string `json:"note,omitempty"`
	Context string `json:"context,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Bounds of a request beyond the job's.
const (
	MaxGrants       = 64
	MaxTargetChars  = 256
	MaxRequestBytes = 512 << 10 // a 64 KiB script JSON-escaped at its worst, and the rest
)
