package richsession

import (
	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
)

// Routes: a rich channel's turn is the host's turn route.
func (k *Kind) Routes() []api.Route { return nil }

// ChannelMode stops the channel's session when it changed mode or
// profile (a running turn keeps it until it settles, then the next turn
// starts anew).
func (k *Kind) ChannelMode(channel, mode, profile string) {
	k.StopIdle(channel, mode, profile, mode == chanstate.ModeRich)
}

// Stop stops every session (after the host's turns: no turn takes one any
// more).
func (k *Kind) Stop() { k.StopAll("host stop") }
