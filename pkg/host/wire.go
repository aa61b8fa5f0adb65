package host

// The API's request and response bodies are pkg/apiwire's (shared with
// pkg/client); what stays here are the host's own bounds and mode names.

// MaxRichBodyBytes bounds a rich channel's turn request: 100,000
// characters of text escaped as JSON plus the speaker fields and ten
// attachments (URL, name and type, escaped).
const MaxRichBodyBytes = 800 << 10

// Modes are the values of PUT /v1/channels/{channel}/mode's "mode".
var Modes = []string{ModeOn, ModeOff, ModeRich}
