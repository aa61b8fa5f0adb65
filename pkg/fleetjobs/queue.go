// Package fleetjobs is the fleet's jobs work queue (docs/fleet.md):
// runs, prechecks and delegated jobs go through stream SANDBOX_JOBS, taken
// by any box of the fleet; it works over a small handle on the fleet's
// connection (fleet.JobsHandle), and pkg/fleet makes the resources with the
// family's others. A box pulls a job only while it holds a free admission
// slot, one job per slot (JobWorker); a job's frames go back on
// SANDBOX_JOBEVENTS in order, its result is written create-only to KV
// SANDBOX_JOBRESULTS, a cancel and a run's approval live in KV
// SANDBOX_JOBCONTROL.
//
// Guarantee: a job is pulled only with a free slot; it has one result
// (create-only, however often it was delivered) and one approval decision
// (a compare-and-swap on the pending record, from any box); a job
// delivered past the bound is given up without running; every record
// another box wrote (a job, a frame, a result, an approval) is checked
// against its bounds and the box-name rule before it is used or logged.
// Credentials and policies never pass through this package.
package fleetjobs

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// Queue is one connection's handle on the jobs work queue.
type Queue struct {
	js      jetstream.JetStream
	results jetstream.KeyValue // fleet.JobResultsBucket
	control jetstream.KeyValue // fleet.JobControlBucket

	mu sync.Mutex
	// waiting: this box's responders of the approvals it waits for
	// (approvals.go), by job key.
	waiting map[string]*nats.Subscription
}

// New is the queue over the fleet's connection (its JobsHandle); nil for
// a nil fleet (a box not in fleet mode has no queue).
func New(f *fleet.Fleet) *Queue {
	if f == nil {
		return nil
	}
	h := f.Jobs()
	return &Queue{js: h.JS, results: h.Results, control: h.Control}
}

// opTimeout is the deadline of a call that needs the cluster but carries
// no caller ctx.
const opTimeout = 10 * time.Second
