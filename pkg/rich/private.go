package rich

import (
	"bytes"
	"encoding/json"

	"github.com/roundtable-sandbox/sandbox/pkg/memory"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

// Private tool exchanges (issue 16; the seed's "Private tool exchanges in
// Pi mode"). Every turn writes a reader record (sessions.ReaderRecord)
// before its user message; a tool exchange is private to a reader when
// its result entry says so (privateTo: a host tool's tagged result, or a
// memory tool's, whose exchanges always belong to their turn's reader), or
// when it is a memory or invalid_tool call (malformed, truncated or
// unanswered built-in calls belong to their turn's reader; with no reader
// record, to nobody). For any other reader the call's arguments and its
// result become placeholders while the call id and name stay, so the
// pairing stays valid; the reader itself sees the original. Compaction
// (the host compactor's request, kept tail included, and the worker's
// own summary) is built from the projection for nobody, so it never gets a
// private exchange. The session itself keeps the originals.

// Placeholders another reader sees.
const (
	PrivateInput  = `{"private":"Arguments of another participant's private tool call."}`
	PrivateResult = "Private tool result for another participant."
)

// nobody is the reader of compaction: it reads no private exchange.
const nobody = "\x00nobody"

// unknownReader owns built-in calls written without a reader record.
const unknownReader = "\x00unknown"

// Capabilities the worker declares in /worker/ready: it projects tagged
// exchanges, compacts privately and keeps reader records.
var Capabilities = richproto.Capabilities{PrivateTo: true, ReaderRecords: true}

// readerKey is the reader a turn's private exchanges belong to: its
// principal, else (a turn without one) its speaker, in a form no principal
// id can take (principal ids have no control characters).
func readerKey(turn *richproto.Turn) string {
	if turn.Reader != "" {
		return turn.Reader
	}
	return "\x00speaker:" + turn.Speaker.ID
}

// builtinPrivate reports whether a call of name belongs to its turn's
// reader whatever its result says.
func builtinPrivate(name string) bool {
	switch name {
	case memory.ToolSet, memory.ToolGet, memory.ToolRemove, InvalidToolName:
		return true
	}
	return false
}

// privateCalls maps each private call id of c to the reader it is private
// to; mine are this turn's entries (their reader is reader).
func privateCalls(c SessionContext, mine map[string]bool, reader string) map[string]string {
	owners := map[string]string{}
	for _, e := range c.Messages {
		switch e.Type {
		case TypeToolResult:
			if e.PrivateTo == "" {
				continue
			}
			for _, b := range blocksOf(e) {
				if b.Type == BlockToolResult {
					owners[b.ToolUseID] = e.PrivateTo
				}
			}
		case TypeAssistant:
			owner := unknownReader
			if mine[e.ID] {
				owner = reader
			} else if r, ok := c.Owner[e.ID]; ok {
				owner = r.Reader
			}
			for _, b := range blocksOf(e) {
				if b.Type == BlockToolUse && builtinPrivate(b.Name) {
					if _, tagged := owners[b.ID]; !tagged {
						owners[b.ID] = owner
					}
				}
			}
		}
	}
	return owners
}

// project is c as reader may see it: every private exchange of another
// reader with placeholders (c itself is not changed).
func project(c SessionContext, mine map[string]bool, reader string) SessionContext {
	owners := privateCalls(c, mine, reader)
	hidden := func(id string) bool { o, ok := owners[id]; return ok && o != reader }
	out := c
	out.Messages = make([]Entry, len(c.Messages))
	for i, e := range c.Messages {
		out.Messages[i] = e
		if e.Type != TypeAssistant && e.Type != TypeToolResult {
			continue
		}
		blocks := blocksOf(e)
		changed := false
		for j, b := range blocks {
			switch {
			case b.Type == BlockToolUse && hidden(b.ID):
				blocks[j].Input = json.RawMessage(PrivateInput)
				changed = true
			case b.Type == BlockToolResult && hidden(b.ToolUseID):
				blocks[j].Content = []ContentBlock{{Type: BlockText, Text: PrivateResult}}
				blocks[j].IsError = false
				changed = true
			}
		}
		if changed {
			out.Messages[i].Content = mustJSON(blocks)
		}
	}
	return out
}

// checkProjected is the refusal before any provider call: no private
// exchange of another reader may be in msgs other than as its
// placeholder or the worker's own missing-result answer (a request that
// would replay one is refused, whatever path built it).
func checkProjected(msgs []Message, owners map[string]string, reader string) error {
	for _, m := range msgs {
		for _, b := range m.Content {
			switch {
			case b.Type == BlockToolUse:
				if o, ok := owners[b.ID]; ok && o != reader && !bytes.Equal(b.Input, []byte(PrivateInput)) {
					return fail(richproto.CauseInternal, "refused: a request would replay another reader's private call")
				}
			case b.Type == BlockToolResult:
				if o, ok := owners[b.ToolUseID]; ok && o != reader &&
					(len(b.Content) != 1 || b.Content[0].Type != BlockText ||
						b.Content[0].Text != PrivateResult && b.Content[0].Text != ToolMissingText) {
					return fail(richproto.CauseInternal, "refused: a request would replay another reader's private result")
				}
			}
		}
	}
	return nil
}

// hasPrivateHistory reports whether c holds any private exchange or a
// reader record tainted by private memory (the ready's privateHistory).
func hasPrivateHistory(c SessionContext) bool {
	for _, r := range c.Owner {
		if r.PrivateMemory {
			return true
		}
	}
	return len(privateCalls(c, nil, "")) > 0
}

// ready is the worker's announcement: both capabilities, and whether the
// session it holds open keeps private history (a worker that has not
// opened its session yet reports none: it declares both capabilities, so
// the host needs nothing more of it either way).
func (w *Worker) ready() richproto.Ready {
	r := richproto.Ready{Capabilities: Capabilities}
	if w.sess != nil {
		r.PrivateHistory = hasPrivateHistory(w.sess.Context())
	}
	return r
}

// readerRecord is this turn's reader record; privateMemory: the turn's
// private memory prompt block (the speaker's memory preview) is not empty.
func readerRecord(turn *richproto.Turn, privateMemory bool) Entry {
	return Entry{Type: sessions.TypeReaders, Readers: sessions.ReadersJSON(sessions.ReaderRecord{
		Turn: turn.ID, Reader: readerKey(turn), PrivateMemory: privateMemory})}
}

// privateMemory reports whether the turn's private memory prompt block
// (the speaker's memory preview in the system prompt) is not empty.
func (t *turnRun) privateMemory() bool {
	return len(t.mem.Get(memory.ScopeSpeaker+":"+t.turn.Speaker.ID, false, "", "")) > 0
}
