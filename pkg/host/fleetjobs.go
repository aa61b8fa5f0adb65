package host

import (
	"context"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// startFleetJobs: in fleet mode this box takes the fleet's runs, prechecks
// and delegated jobs while a slot of its own admission is free, giving an
// unused one back when local work waits (the kinds' fleet.go); it stops
// taking when the host stops.
func (h *Host) startFleetJobs(ctx context.Context) (stop func(), err error) {
	if h.fleet == nil {
		return func() {}, nil
	}
	return fleet.StartAll(ctx, h.queue.SpareYielding, h.coderun.StartFleet, h.prechecks.StartFleet, h.delegations.StartFleet)
}
