package rich

import (
	"encoding/json"
)

// blocksOf decodes an entry's content (a string is one text block); content
// the worker cannot read becomes no blocks.
func blocksOf(e Entry) []ContentBlock {
	var s string
	if json.Unmarshal(e.Content, &s) == nil {
		return []ContentBlock{{Type: BlockText, Text: s}}
	}
	var blocks []ContentBlock
	if json.Unmarshal(e.Content, &blocks) != nil {
		return nil
	}
	return blocks
}

// buildMessages turns the session's context into the messages of a model
// request that the provider accepts whatever the session holds after a
// crash or a compaction: the summary first, user first, roles
// alternating (same-role messages merged), every tool_use answered by a
// tool_result in the next message (a missing one answered ToolMissingText),
// no tool_result without its tool_use, no tool_use id twice, and thinking blocks only of this
// turn's answers (mine) while thinking is on.
func buildMessages(c SessionContext, mine map[string]bool, thinking bool) []Message {
	var msgs []Message
	push := func(role string, blocks []ContentBlock) {
		if len(blocks) == 0 {
			return
		}
		if n := len(msgs); n > 0 && msgs[n-1].Role == role {
			msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
			return
		}
		msgs = append(msgs, Message{Role: role, Content: blocks})
	}
	seenUse := map[string]bool{}
	for _, e := range c.Messages {
		var kept []ContentBlock
		for _, b := range blocksOf(e) {
			switch {
			case b.Type == BlockText && b.Text == "":
				// The provider refuses empty text blocks.
			case b.Type == BlockToolUse && (seenUse[b.ID] || e.Type != TypeAssistant):
				// A tool_use id is unique in a request (the worker gives
				// unique ones; a session holding others is not trusted).
			case b.Type == BlockToolUse:
				seenUse[b.ID] = true
				kept = append(kept, b)
			case b.Type == BlockThinking && (b.Signature == "" || !thinking || !mine[e.ID]):
			case b.Type == BlockRedactedThinking && (b.Data == "" || !thinking || !mine[e.ID]):
			default:
				kept = append(kept, b)
			}
		}
		switch e.Type {
		case TypeAssistant:
			push(RoleAssistant, kept)
		case TypeUser, TypeToolResult:
			push(RoleUser, kept)
		}
	}
	// Pair tool calls with their results.
	out := make([]Message, 0, len(msgs)+2)
	for i, m := range msgs {
		if m.Role == RoleUser {
			var open map[string]bool
			if i > 0 && msgs[i-1].Role == RoleAssistant {
				open = toolUses(msgs[i-1])
			}
			results := []ContentBlock{}
			other := []ContentBlock{}
			for _, b := range m.Content {
				switch {
				case b.Type != BlockToolResult:
					other = append(other, b)
				case open[b.ToolUseID]:
					delete(open, b.ToolUseID)
					results = append(results, b)
				}
			}
			if i > 0 && msgs[i-1].Role == RoleAssistant {
				results = append(results, missingResults(msgs[i-1], open)...)
			}
			m.Content = append(results, other...)
			if len(m.Content) > 0 {
				out = append(out, m)
			}
			continue
		}
		out = append(out, m)
		if uses := toolUses(m); len(uses) > 0 && (i+1 == len(msgs) || msgs[i+1].Role != RoleUser) {
			out = append(out, Message{Role: RoleUser, Content: missingResults(m, uses)})
		}
	}
	// A message emptied by the pairing (an orphan result) leaves two of a
	// role side by side: merge them again. (No tool_result can lead a
	// merged-in user message: results survive only right after a call.)
	merged := out[:0]
	for _, m := range out {
		if n := len(merged); n > 0 && merged[n-1].Role == m.Role {
			merged[n-1].Content = append(merged[n-1].Content, m.Content...)
			continue
		}
		merged = append(merged, m)
	}
	out = merged
	// The summary goes first, in a user message.
	lead := []ContentBlock{}
	if c.Summary != "" {
		lead = append(lead, ContentBlock{Type: BlockText, Text: summaryPrefix + c.Summary})
	}
	switch {
	case len(out) > 0 && out[0].Role == RoleUser:
		out[0].Content = append(lead, out[0].Content...)
	default:
		if len(lead) == 0 {
			lead = append(lead, ContentBlock{Type: BlockText, Text: "(The conversation continues.)"})
		}
		out = append([]Message{{Role: RoleUser, Content: lead}}, out...)
	}
	return out
}

func toolUses(m Message) map[string]bool {
	ids := map[string]bool{}
	for _, b := range m.Content {
		if b.Type == BlockToolUse {
			ids[b.ID] = true
		}
	}
	return ids
}

// missingResults answers the tool calls of m still open, in m's order.
func missingResults(m Message, open map[string]bool) []ContentBlock {
	var out []ContentBlock
	for _, b := range m.Content {
		if b.Type == BlockToolUse && open[b.ID] {
			out = append(out, ContentBlock{Type: BlockToolResult, ToolUseID: b.ID, IsError: true,
				Content: []ContentBlock{{Type: BlockText, Text: ToolMissingText}}})
		}
	}
	return out
}
