package fleet

import (
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The jobs work queue's resources (docs/fleet.md): Ensure makes
// them with the family's others, so one place says what a box's NATS user
// needs; pkg/fleetjobs holds what is done with them, over JobsHandle.

// Subject prefixes of the jobs' streams: a job of kind k is published on
// JobsSubjectPrefix+k, its frames on JobEventsSubjectPrefix+k+"."+id.
const (
	JobsSubjectPrefix      = "sandbox.jobs."
	JobEventsSubjectPrefix = "sandbox.jobevents."
)

// Bounds of what a job carries. A job, a frame and a result come from
// another box: the receiving side refuses anything over them, and the
// streams and buckets hold nothing larger.
const (
	// MaxJobBytes bounds a job's payload (the kind's own parameters).
	MaxJobBytes = MaxTurnBytes
	// MaxJobFrameBytes bounds one frame of a job's event stream (an event
	// of the kind, or a chunk of an artifact).
	MaxJobFrameBytes = 512 << 10
	// MaxJobResultBytes bounds a job's result (its summary; the bulk, such
	// as a run's artifacts, travels as frames before it).
	MaxJobResultBytes = 256 << 10
	// MaxJobControlBytes bounds a value in JobControlBucket.
	MaxJobControlBytes = 16 << 10
	// jobEventsMaxMsgs bounds the whole events stream: what every box's
	// unread frames may hold in the cluster, at most 2 GiB of frames of
	// MaxJobFrameBytes (frames of a finished job are purged by the admitting
	// box, the rest age out after jobEventsMaxAge). A count, not MaxBytes:
	// JetStream reserves a stream's MaxBytes on every replica's disk when it
	// places the stream, so 2 GiB would refuse every box whose store has
	// less free (no suitable peers for placement, insufficient storage).
	jobEventsMaxMsgs = (2 << 30) / MaxJobFrameBytes
	jobEventsMaxAge  = 6 * time.Hour
	jobKVTTL         = 24 * time.Hour
)

// boxNameRe is fleet.box's rule (a DNS label, pkg/config).
var boxNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidBox: a box name another box wrote into a record (a frame, a result,
// an approval, a mode) is checked with it before it is used or logged.
func ValidBox(name string) bool { return boxNameRe.MatchString(name) }

// JobsHandle is what pkg/fleetjobs works over: this connection's
// JetStream and the jobs' two buckets, bound with the fleet's resources.
type JobsHandle struct {
	JS jetstream.JetStream
	// Results is JobResultsBucket, Control JobControlBucket.
	Results, Control jetstream.KeyValue
}

// Jobs is the jobs work queue's handle on this fleet's connection.
func (f *Fleet) Jobs() JobsHandle {
	return JobsHandle{JS: f.js, Results: f.jobResults, Control: f.jobControl}
}
