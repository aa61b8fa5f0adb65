package host

import (
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/delegationrun"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// The host's kinds, for tests that reach into one.
func (h *Host) codeRuns() *coderun.Kind             { return Kind[*coderun.Kind](h) }
func (h *Host) sealedTurns() *sealedturn.Kind       { return Kind[*sealedturn.Kind](h) }
func (h *Host) richSessions() *richsession.Kind     { return Kind[*richsession.Kind](h) }
func (h *Host) delegationRuns() *delegationrun.Kind { return Kind[*delegationrun.Kind](h) }
func (h *Host) precheckRuns() *precheckrun.Kind     { return Kind[*precheckrun.Kind](h) }

// standbyPool is the sealed turns' standby pool (nil when standbys are off).
func (h *Host) standbyPool() *standby.Pool { return h.sealedTurns().Pool() }

// richTuning is o's rich session tuning, added when o has none.
func richTuning(o *Options) *richsession.Tuning {
	for _, v := range o.Tuning {
		if t, ok := v.(*richsession.Tuning); ok {
			return t
		}
	}
	t := &richsession.Tuning{}
	o.Tuning = append(o.Tuning, t)
	return t
}
