package fleet

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetworkspace"
)

// The family's JetStream resources (docs/fleet.md). A box's NATS user
// needs exactly these, plus pcgroups' static-consumer-groups bucket.
const (
	TurnsStream     = "SANDBOX_TURNS"
	RepliesBucket   = "SANDBOX_REPLIES"
	ChannelsBucket  = "SANDBOX_CHANNELS"
	WorkspaceBucket = fleetworkspace.Bucket
	JobsStream      = "SANDBOX_JOBS"
	// JobEventsStream carries each job's frames (sandbox.jobevents.<kind>.<id>)
	// from the box running it to the box that admitted it.
	JobEventsStream = "SANDBOX_JOBEVENTS"
	// JobResultsBucket holds each job's one result, create-only.
	JobResultsBucket = "SANDBOX_JOBRESULTS"
	// JobControlBucket holds what reaches a job from any box: its
	// cancellation, and a run's approval.
	JobControlBucket = "SANDBOX_JOBCONTROL"
	// TurnsGroup is the static partitioned consumer group on TurnsStream;
	// its members are the partitions ("p0", "p1", ...), each box joins every
	// member, and the pinned instance of a member is the partition's owner.
	TurnsGroup = "turns"

	turnsSubjectPrefix = "sandbox.turns."
)

// Partition is the channel's partition among n: a stable hash of the
// channel key (the first 8 bytes of its SHA-256), the same on every box and
// every version. n must be the same on every box for the life of the stream.
func Partition(channel string, n int) int {
	sum := sha256.Sum256([]byte(channel))
	return int(binary.BigEndian.Uint64(sum[:8]) % uint64(n))
}

// TurnSubject is the subject a turn of partition p is published on.
func TurnSubject(p int) string { return turnsSubjectPrefix + strconv.Itoa(p) }

// channelKey is the channel's key in ChannelsBucket: channel keys may hold
// characters KV keys refuse, so the key is a hash and the value names the
// channel.
func channelKey(channel string) string {
	sum := sha256.Sum256([]byte(channel))
	return "c." + hex.EncodeToString(sum[:16])
}

// workspaceName is a committed snapshot's object: channel and generation,
// and the claim's revision so that a refused commit's upload (a zombie's)
// can never overwrite the snapshot another box committed for the same
// generation.
func workspaceName(channel string, gen, claimRev uint64) string {
	return fmt.Sprintf("%s.%d.%d", channelKey(channel), gen, claimRev)
}

func memberName(p int) string { return "p" + strconv.Itoa(p) }
