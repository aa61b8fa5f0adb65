package sealedturn

import (
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// Listed are the standbys for GET /v1/turns (a standby being bound is
// listed by its turn too: the host lists an id once).
func (k *Kind) Listed() []apiwire.Turn {
	if k.standbys == nil {
		return nil
	}
	var out []apiwire.Turn
	for _, w := range k.standbys.Turns() {
		out = append(out, apiwire.Turn{ID: w.TurnID, ChannelTag: ids.ChannelTag(w.Channel), DeadlineUnix: w.Expiry.Unix(), DeadlineUnixMs: w.Expiry.UnixMilli(), Standby: w.State})
	}
	return out
}

// ChannelMode discards the channel's standby when it left sandbox mode
// (off, or rich).
func (k *Kind) ChannelMode(channel, mode, _ string) {
	if mode != chanstate.ModeOn {
		k.Drop(channel, standby.ReasonChannelOff)
	}
}

// Stop closes the standby pool (after the host's turns: none binds a
// standby any more, and none refills).
func (k *Kind) Stop() {
	if k.standbys != nil {
		k.standbys.Close()
	}
}
