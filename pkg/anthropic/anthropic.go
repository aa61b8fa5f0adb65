// Package anthropic is the rich channel's model wire: the Anthropic Messages
// types the worker builds requests with and reads streams into, the broker's
// rebuild of a guest request into the one it sends (Rebuild,
// RebuildCountTokens), and the broker's filter of the upstream's
// server-sent events (FilterStream).
//
// Guarantees: a rebuilt request holds only what was checked, re-encoded from
// the decoded value (strictjson: one object, no duplicate keys, valid
// Unicode): text, base64 images (PNG, JPEG, WebP, GIF, size-bounded, bytes
// matching the declared type), custom tools with local-only schemas
// (toolschema), their tool_use and tool_result blocks, and the assistant's
// own thinking blocks replayed; the model is the policy's, max_tokens never
// above its limit, thinking budget and effort never above the turn's ceiling.
// Everything else (server tools, url or file sources, documents, unknown
// fields, metadata beyond user_id, cache_control outside its places) is
// refused with ErrInvalid, a body over MaxRequestBytes with ErrTooLarge.
// FilterStream passes only well-formed events of the known types, each as
// soon as it is checked, refuses any event that reflects a credential
// (with the text of earlier events, so a credential split across events is
// caught), bounds silence and total bytes, and replaces upstream error
// events with a generic one. Standard library, strictjson and toolschema
// only: the worker imports this package.
package anthropic

import (
	"encoding/json"
	"errors"
)

// Bounds of the seed's rich mode.
const (
	// MaxRequestBytes bounds a request body (the seed's 96 MiB input bodies).
	MaxRequestBytes = 96 << 20
	// MaxResponseBytes bounds one upstream answer, streamed or not (50 MiB).
	MaxResponseBytes = 50 << 20
	// MaxJSONTokens bounds the JSON tokens of a request body, counted before
	// decoding (strictjson.CountTokens): a long conversation has far fewer;
	// image data is one token however long.
	MaxJSONTokens = 1 << 20
	// MaxImageBytes bounds one decoded image (the seed's 20 MiB).
	MaxImageBytes = 20 << 20
	// MaxImages bounds the images of one request (the provider's own limit).
	MaxImages = 100
	// MaxTools bounds the tool definitions of one request.
	MaxTools = 128
	// MaxCacheBreakpoints is the provider's limit of cache_control marks.
	MaxCacheBreakpoints = 4
	// MaxStopSequences and MaxStopSequenceBytes bound stop_sequences.
	MaxStopSequences     = 8
	MaxStopSequenceBytes = 256
	// MaxUserIDBytes bounds metadata.user_id.
	MaxUserIDBytes = 256
	// MinThinkingBudget is the provider's smallest budget_tokens.
	MinThinkingBudget = 1024
	// Version is the anthropic-version header the broker sends.
	Version = "2023-06-01"
)

// Error categories. Messages never quote input.
var (
	// ErrInvalid: a request the broker will not send (HTTP 400).
	ErrInvalid = errors.New("invalid anthropic request")
	// ErrTooLarge: a request body over MaxRequestBytes (HTTP 413).
	ErrTooLarge = errors.New("anthropic request too large")
	// ErrStream: the upstream's stream broke a rule (malformed, unknown
	// event, over the limit); the worker sees a generic error event.
	ErrStream = errors.New("upstream stream refused")
	// ErrReflected: the upstream's answer reflects a credential.
	ErrReflected = errors.New("upstream answer reflects a credential")
	// ErrSilence: no request-body read or response chunk within the
	// silence limit.
	ErrSilence = errors.New("upstream silent too long")
)

type refusal struct {
	msg string
	cat error
}

func (r *refusal) Error() string { return "anthropic: " + r.msg }
func (r *refusal) Unwrap() error { return r.cat }

func invalid(msg string) error { return &refusal{msg, ErrInvalid} }

// Request is a Messages request as the worker builds it (and count_tokens,
// leaving MaxTokens, Stream and the sampling fields zero). Only the fields
// Rebuild admits exist here.
type Request struct {
	Model         string        `json:"model,omitempty"`
	MaxTokens     int           `json:"max_tokens,omitempty"`
	System        []TextBlock   `json:"system,omitempty"`
	Messages      []Message     `json:"messages"`
	Tools         []Tool        `json:"tools,omitempty"`
	ToolChoice    *ToolChoice   `json:"tool_choice,omitempty"`
	Thinking      *Thinking     `json:"thinking,omitempty"`
	OutputConfig  *OutputConfig `json:"output_config,omitempty"`
	Stream        bool          `json:"stream,omitempty"`
	StopSequences []string      `json:"stop_sequences,omitempty"`
	Temperature   *float64      `json:"temperature,omitempty"`
	TopP          *float64      `json:"top_p,omitempty"`
	TopK          *int          `json:"top_k,omitempty"`
	Metadata      *Metadata     `json:"metadata,omitempty"`
}

// Roles.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one turn of the conversation.
type Message struct {
	Role    string         `json:"role"`
	Content []ContentBlock `json:"content"`
}

// Content block types.
const (
	BlockText             = "text"
	BlockImage            = "image"
	BlockToolUse          = "tool_use"
	BlockToolResult       = "tool_result"
	BlockThinking         = "thinking"
	BlockRedactedThinking = "redacted_thinking"
)

// ContentBlock is one block of a message: text, image, tool_use,
// tool_result, thinking or redacted_thinking (assistant history only).
// Only the fields of its Type are set.
type ContentBlock struct {
	Type string `json:"type"`
	// text
	Text string `json:"text,omitempty"`
	// image
	Source *ImageSource `json:"source,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result: Content is text and image blocks.
	ToolUseID string         `json:"tool_use_id,omitempty"`
	Content   []ContentBlock `json:"content,omitempty"`
	IsError   bool           `json:"is_error,omitempty"`
	// thinking (replayed with its signature) and redacted_thinking (Data).
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Data      string `json:"data,omitempty"`

	CacheControl *CacheControl `json:"cache_control,omitempty"`
}

// TextBlock is a system prompt block.
type TextBlock struct {
	Type         string        `json:"type"` // "text"
	Text         string        `json:"text"`
	CacheControl *CacheControl `json:"cache_control,omitempty"`
}

// ImageSource is a base64 image: Type "base64", MediaType one of
// image/png, image/jpeg, image/webp, image/gif.
type ImageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// CacheControl marks a prompt-cache breakpoint: Type "ephemeral", TTL ""
// (the provider's 5m), "5m" or "1h".
type CacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// Tool is a custom tool (the only kind the broker admits).
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl *CacheControl   `json:"cache_control,omitempty"`
}

// ToolChoice: Type auto, any, none or tool (with Name).
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// Thinking types.
const (
	ThinkingEnabled  = "enabled"
	ThinkingAdaptive = "adaptive"
	ThinkingDisabled = "disabled"
)

// Thinking configures extended thinking: Type enabled (with BudgetTokens),
// adaptive or disabled.
type Thinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// OutputConfig carries the effort: low, medium, high, xhigh or max (the
// broker lowers it to the turn's ceiling, which is never max).
type OutputConfig struct {
	Effort string `json:"effort,omitempty"`
}

// Metadata is the only metadata the broker passes: an opaque user id.
type Metadata struct {
	UserID string `json:"user_id,omitempty"`
}

// Response is a non-streamed Messages answer, and the message of a
// message_start event (then Content is empty and Usage partial).
type Response struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   string         `json:"stop_reason,omitempty"`
	StopSequence string         `json:"stop_sequence,omitempty"`
	Usage        Usage          `json:"usage"`
}

// Usage counts tokens.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens,omitempty"`
}

// CountTokensResponse is count_tokens' answer.
type CountTokensResponse struct {
	InputTokens int `json:"input_tokens"`
}

// Stream event types.
const (
	EventMessageStart      = "message_start"
	EventContentBlockStart = "content_block_start"
	EventContentBlockDelta = "content_block_delta"
	EventContentBlockStop  = "content_block_stop"
	EventMessageDelta      = "message_delta"
	EventMessageStop       = "message_stop"
	EventPing              = "ping"
	EventError             = "error"
)

// Delta types of content_block_delta.
const (
	DeltaText      = "text_delta"
	DeltaThinking  = "thinking_delta"
	DeltaSignature = "signature_delta"
	DeltaInputJSON = "input_json_delta"
)

// StreamEvent is one server-sent event's data, decoded. Which fields are
// set depends on Type.
type StreamEvent struct {
	Type string `json:"type"`
	// message_start
	Message *Response `json:"message,omitempty"`
	// content_block_start / _delta / _stop
	Index        int           `json:"index"`
	ContentBlock *ContentBlock `json:"content_block,omitempty"`
	// content_block_delta: Delta.Type is a Delta* constant; message_delta:
	// Delta.StopReason.
	Delta *Delta `json:"delta,omitempty"`
	// message_delta
	Usage *Usage `json:"usage,omitempty"`
	// error
	Error *APIError `json:"error,omitempty"`
}

// Delta is a content_block_delta's or message_delta's delta.
type Delta struct {
	Type         string `json:"type,omitempty"`
	Text         string `json:"text,omitempty"`
	Thinking     string `json:"thinking,omitempty"`
	Signature    string `json:"signature,omitempty"`
	PartialJSON  string `json:"partial_json,omitempty"`
	StopReason   string `json:"stop_reason,omitempty"`
	StopSequence string `json:"stop_sequence,omitempty"`
}

// APIError is the error of an error event or of an error answer
// ({"type":"error","error":{...}}). From the broker, Message is generic.
type APIError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// ErrorBody is an error answer's body.
type ErrorBody struct {
	Type  string   `json:"type"` // "error"
	Error APIError `json:"error"`
}
