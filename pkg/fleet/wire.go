package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetworkspace"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// Bounds of what travels. A turn's text is bounded by the host's API before
// it gets here; these bound what a box accepts from the stream, which
// another box (or a fleet client) wrote.
const (
	MaxTurnBytes      = 768 << 10               // one turn message
	MaxReplyTextBytes = 512 << 10               // one reply's text
	MaxWorkspaceBytes = fleetworkspace.MaxBytes // one channel's workspace snapshot
	maxIDBytes        = 256
)

// Bounds of the values as the engine stores them. A text's raw bound is not
// its stored size: JSON makes a control character six bytes (\u0001), so a
// reply within MaxReplyTextBytes can still be refused by its bucket; and a
// bucket's MaxValueSize counts the write's headers with the value. Every
// value is measured encoded (encodeJSON) against these.
const (
	// MaxReplyBytes is RepliesBucket's MaxValueSize.
	MaxReplyBytes = MaxReplyTextBytes + 64<<10
	// MaxStateBytes is ChannelsBucket's MaxValueSize: a state carries its
	// last turn's reply.
	MaxStateBytes = 2 * MaxReplyBytes
	// headerRoom is kept for a write's headers, which the engine counts
	// in MaxValueSize, MaxMsgSize and the server's max_payload: a KV
	// write's expected revision, a turn's message id and stream (each
	// under 100 bytes).
	headerRoom = 256
)

// valueLimit is the largest encoded value a bucket of MaxValueSize
// bucketMax stores through a connection whose server takes messages of at
// most maxPayload bytes (max_payload: 1 MiB unless the operator's NATS
// says otherwise).
func valueLimit(bucketMax, maxPayload int64) int {
	if maxPayload > 0 {
		bucketMax = min(bucketMax, maxPayload)
	}
	return int(bucketMax) - headerRoom
}

// encodeJSON encodes v as stored: without HTML escaping (which makes '<',
// '>' and '&' six bytes each and protects nothing here: no value is
// embedded in HTML), without a trailing newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ErrInvalid marks a turn, reply or state that fails its bounds.
var ErrInvalid = errors.New("invalid")

// Speaker is who spoke (as the host API's speaker).
type Speaker struct {
	ID          string `json:"id"`
	Name        string `json:"name,omitempty"`
	PrincipalID string `json:"principalId,omitempty"`
}

// Turn is one admitted turn as it travels on the stream.
type Turn struct {
	ID      string  `json:"id"`
	Channel string  `json:"channel"`
	Speaker Speaker `json:"speaker"`
	Text    string  `json:"text"`
	// From is the box that admitted it ("" for a fleet client).
	From string `json:"from,omitempty"`
	// DeadlineUnixMs is the turn's deadline on its publisher's clock; a box
	// never compares it with its own clock (clocks of boxes differ).
	DeadlineUnixMs int64 `json:"deadlineUnixMs"`
	// TimeoutMs is how long the turn has from its publication (Submit
	// sets it from DeadlineUnixMs on the publisher's own clock). The box
	// that takes it ages it on the engine's clock (the turns stream's
	// timestamps, all stamped by its leader), answers "deadline" without
	// running once it is used up, and bounds the run by what is left on
	// its own monotonic clock (docs/fleet.md, *Failure model*). 0: a turn
	// of a version before it, judged by DeadlineUnixMs.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// Validate checks a turn against its bounds.
func (t Turn) Validate() error {
	if err := ids.ValidTurnID(t.ID); err != nil {
		return fmt.Errorf("turn id: %w", err)
	}
	if err := ids.ValidChannel(t.Channel); err != nil {
		return fmt.Errorf("turn channel: %w", err)
	}
	for name, v := range map[string]string{"speaker.id": t.Speaker.ID, "speaker.name": t.Speaker.Name, "speaker.principalId": t.Speaker.PrincipalID, "from": t.From} {
		if len(v) > maxIDBytes || !utf8.ValidString(v) {
			return fmt.Errorf("turn %s: at most %d bytes of UTF-8: %w", name, maxIDBytes, ErrInvalid)
		}
	}
	if t.Speaker.ID == "" {
		return fmt.Errorf("turn speaker.id is required: %w", ErrInvalid)
	}
	if !utf8.ValidString(t.Text) {
		return fmt.Errorf("turn text must be UTF-8: %w", ErrInvalid)
	}
	if t.DeadlineUnixMs <= 0 {
		return fmt.Errorf("turn deadlineUnixMs is required: %w", ErrInvalid)
	}
	if t.TimeoutMs < 0 {
		return fmt.Errorf("turn timeoutMs must not be negative: %w", ErrInvalid)
	}
	return nil
}

// Error kinds a reply carries instead of a text; generic by design (the
// details stay in the owner box's log).
const (
	ErrorFailed   = "failed"
	ErrorDeadline = "deadline"
	ErrorModeOff  = "mode off"
	// ErrorCancelled: cancelled on the owner box (the host API's cancel).
	ErrorCancelled = "cancelled"
)

// Reply is a turn's committed answer, the value under the turn id in
// RepliesBucket.
type Reply struct {
	TurnID string `json:"turnId"`
	OK     bool   `json:"ok"`
	Text   string `json:"text"`
	// Error is set (an Error* kind) when the turn did not produce a reply.
	Error string `json:"error,omitempty"`
	// Box committed it; Generation is the channel's generation it made and
	// Seq the turn's sequence in TurnsStream.
	Box        string `json:"box"`
	Generation uint64 `json:"generation"`
	Seq        uint64 `json:"seq"`
	// Runs is how many boxes' takes of the turn the claims recorded
	// before this commit (1: it ran once; more: a paused or cut-off owner
	// ran it too, docs/fleet.md, *Failure model*). 0 from a version that
	// did not count.
	Runs uint64 `json:"runs,omitempty"`
}

// failed is the reply that ends turn r's turn without a text (the
// generic ErrorFailed), committed by the same box at the same place.
func (r Reply) failed() Reply {
	return Reply{TurnID: r.TurnID, Error: ErrorFailed, Box: r.Box, Generation: r.Generation, Seq: r.Seq, Runs: r.Runs}
}

func (r Reply) validate() error {
	if len(r.Text) > MaxReplyTextBytes || !utf8.ValidString(r.Text) {
		return fmt.Errorf("reply text: at most %d bytes of UTF-8: %w", MaxReplyTextBytes, ErrInvalid)
	}
	if len(r.Error) > maxIDBytes || len(r.Box) > maxIDBytes {
		return fmt.Errorf("reply fields too long: %w", ErrInvalid)
	}
	return nil
}

// ChannelState is a channel's value in ChannelsBucket: its committed
// generation and last turn (with that turn's reply, so that any box can
// finish publishing it after the committing box died), and the claim of the
// turn being worked on. Every take writes a claim, so the revision a box's
// commit expects is its own claim's.
type ChannelState struct {
	Channel    string `json:"channel"`
	Generation uint64 `json:"generation"`
	// Workspace names the committed snapshot ("" before the first): an
	// object of the workspace store, or, when WorkspaceData is set, that.
	Workspace string `json:"workspace,omitempty"`
	// WorkspaceData is the committed snapshot itself when it is small
	// (at most InlineWorkspaceBytes, and the state with it fits its
	// bucket): committed in the state's own write, no object stored
	// (docs/fleet.md, *Workspaces*).
	WorkspaceData []byte `json:"workspaceData,omitempty"`
	LastTurn      string `json:"lastTurn,omitempty"`
	LastSeq       uint64 `json:"lastSeq,omitempty"`
	LastReply     *Reply `json:"lastReply,omitempty"`
	// Owner claimed ClaimTurn (sequence ClaimSeq); both cleared by commit.
	Owner     string `json:"owner,omitempty"`
	ClaimTurn string `json:"claimTurn,omitempty"`
	ClaimSeq  uint64 `json:"claimSeq,omitempty"`
	// ClaimRuns counts the takes of ClaimTurn: a take finding the claim
	// already on its turn (another take that never committed) adds one.
	ClaimRuns uint64 `json:"claimRuns,omitempty"`
}

// InlineWorkspaceBytes bounds a snapshot committed inside its channel's
// state (ChannelState.WorkspaceData) rather than as an object: each claim
// and commit writes it again, so only small ones; a larger one costs the
// object store's upload (an info read and a replicated write) and, once
// superseded, its delete (docs/fleet.md, *Workspaces*).
const InlineWorkspaceBytes = 64 << 10

// inline: the committed snapshot is in the state, not an object.
func (st ChannelState) inline() bool { return len(st.WorkspaceData) > 0 }

func decodeState(data []byte) (ChannelState, error) {
	var st ChannelState
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("channel state: %w", ErrInvalid)
	}
	return st, nil
}

func decodeReply(data []byte) (Reply, error) {
	var r Reply
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("reply: %w", ErrInvalid)
	}
	return r, r.validate()
}
