package host

import (
	"context"
	"sync"
)

// Fleet jobs (DESIGN.md section 17): in fleet mode this box takes the
// fleet's run jobs while it has a free slot of its own admission, one job
// per slot, giving an unused slot back as soon as a local turn or a
// standby's preparation waits for it. The kind runs the job
// (pkg/coderun's fleet.go); the host lends it the slot and stops the
// taking as soon as it starts stopping, so a stopping box takes no work.

// startFleetJobs starts taking run jobs; stop waits for the jobs running.
func (h *Host) startFleetJobs(ctx context.Context) (stop func(), err error) {
	if h.fleet == nil {
		return func() {}, nil
	}
	w, err := h.coderun.StartFleet(ctx, h.queue.SpareYielding)
	if err != nil || w == nil {
		return func() {}, err
	}
	once := sync.OnceFunc(w.Stop)
	unhook := context.AfterFunc(h.stopCtx, once)
	return func() { unhook(); once() }, nil
}
