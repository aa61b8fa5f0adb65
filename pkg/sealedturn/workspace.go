package sealedturn

import (
	"fmt"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/wsarchive"
)

// A sealed channel's workspace as a fleet snapshot (docs/fleet.md,
// Workspaces): packed after a turn on the box that ran it, restored before
// a turn on a box whose copy is older.

// PackWorkspace archives the channel's workspace. Called after the turn's
// cleanup, so no container of the turn writes it any more. The workspace
// is the guest's (0700): the host reads it with CAP_DAC_READ_SEARCH, which
// the fleet's drop-in grants (never following a link: pkg/wsarchive).
func (k *Kind) PackWorkspace(channel string, lim wsarchive.Limits) ([]byte, error) {
	ws, err := layout.WorkspaceDir(k.cfg.WorkspaceRoot, channel)
	if err != nil {
		return nil, err
	}
	data, st, err := wsarchive.Pack(ws, lim)
	if err != nil {
		return nil, fmt.Errorf("pack workspace (in fleet mode the host reads guests' workspaces with CAP_DAC_READ_SEARCH, granted by the fleet drop-in): %w", err)
	}
	if st.Skipped > 0 {
		k.log.Info("workspace entries not carried to the fleet: only directories and regular files move", "channel", ids.ChannelTag(channel), "skipped", st.Skipped)
	}
	return data, nil
}

// RestoreWorkspace replaces the channel's workspace with a snapshot and
// gives it to the channel's guest uid on this box: a uid is a slot of one
// box's range, so the snapshot carries none and each box uses its own.
func (k *Kind) RestoreWorkspace(channel string, data []byte, lim wsarchive.Limits) error {
	ws, err := layout.WorkspaceDir(k.cfg.WorkspaceRoot, channel)
	if err != nil {
		return err
	}
	uid, err := k.host.GuestFor(channel, ws)
	if err != nil {
		return fmt.Errorf("guest uid: %w", err)
	}
	tag := ids.ChannelTag(channel)
	if err := k.life.EnsureWorkspace(ws, uid, tag); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := wsarchive.Unpack(ws, data, lim); err != nil {
		return fmt.Errorf("restore workspace: %w", err)
	}
	// The restored tree is the host's until it is handed over.
	if err := k.life.EnsureWorkspace(ws, uid, tag); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}
