package cli

import (
	"fmt"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// doctorAdmission prints the global concurrency in force and how it was
// reached, the queue's bounds, and warns when a configured cap is above
// what this machine's memory and CPUs bear (a burst would thrash: issue 25
// measured most of 64 turns failing with no cap on 2 cores).
func doctorAdmission(cfg *config.Config, d doctorDeps, add func(name, status, detail, remedy string)) {
	if d.machine == nil {
		return
	}
	m := d.machine()
	c := cfg.GlobalConcurrency(m)
	s := cfg.StartConcurrency(m)
	detail := fmt.Sprintf("global concurrency %d (%s); of those at most %d start at once (%s); a turn waits at most %d s for a slot (queue.maxWaitSeconds), then is answered 429 busy; at most %d wait per channel (queue.depth)",
		c.Cap, c.Why, s.Cap, s.Why, cfg.Queue.MaxWaitSeconds, cfg.Queue.Depth)
	if !c.Derived {
		derived := *cfg
		derived.Queue.GlobalConcurrency = 0
		if dc := derived.GlobalConcurrency(m); c.Cap > dc.Cap {
			add("admission", StatusWarn, detail+fmt.Sprintf("; this machine bears %d (%s)", dc.Cap, dc.Why),
				fmt.Sprintf("lower queue.globalConcurrency to %d or less, or set it to 0 to derive it: above that a burst can run broker units out of their start timeout", dc.Cap))
			return
		}
	}
	add("admission", StatusOK, detail, "")
}
