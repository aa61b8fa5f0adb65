package rich

import "github.com/roundtable-sandbox/sandbox/pkg/anthropic"

// The Anthropic Messages shapes the worker sends and reads are
// pkg/anthropic's: the broker's Rebuild admits exactly these.
type (
	Request      = anthropic.Request
	Message      = anthropic.Message
	ContentBlock = anthropic.ContentBlock
	TextBlock    = anthropic.TextBlock
	Tool         = anthropic.Tool
	Thinking     = anthropic.Thinking
	Usage        = anthropic.Usage
	Response     = anthropic.Response
	streamEvent  = anthropic.StreamEvent
)

// Roles and block types.
const (
	RoleUser              = anthropic.RoleUser
	RoleAssistant         = anthropic.RoleAssistant
	BlockText             = anthropic.BlockText
	BlockToolUse          = anthropic.BlockToolUse
	BlockToolResult       = anthropic.BlockToolResult
	BlockThinking         = anthropic.BlockThinking
	BlockRedactedThinking = anthropic.BlockRedactedThinking
)
