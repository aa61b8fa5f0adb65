// Package fleetnats is the NATS side of the fleet (docs/fleet.md)
// that is not the turn engine: the family's stream and bucket names, a
// box's permissions, the nats-server configuration sandbox-nats runs from
// (generated from fleet.* in sandbox.yaml), a box's connection (TLS, nkey)
// and the fleet checks of `sandbox-host doctor`.
//
// Guarantee: a generated configuration requires TLS on the client and the
// route ports, admits only the listed boxes' nkeys, limits each to the
// family's subjects, streams and buckets, fsyncs every write and encrypts
// JetStream's store; anything it cannot honour is an error naming the key.
package fleetnats

// The family's JetStream names: the engine's (pkg/fleet names.go holds the
// same; a box's permissions name each stream exactly, since a NATS wildcard
// matches whole tokens, never a name prefix such as SANDBOX_*).
const (
	StreamTurns      = "SANDBOX_TURNS"      // admitted turns, partitioned by channel key
	StreamJobs       = "SANDBOX_JOBS"       // runs, prechecks, delegation jobs (work queue)
	StreamJobEvents  = "SANDBOX_JOBEVENTS"  // a job's frames, from the box running it to the admitting box
	BucketJobResults = "SANDBOX_JOBRESULTS" // one result per job, create-only
	BucketJobControl = "SANDBOX_JOBCONTROL" // a job's cancellation and a run's approval, from any box
	BucketReplies    = "SANDBOX_REPLIES"    // one reply per turn id, create-only
	BucketChannels   = "SANDBOX_CHANNELS"   // channel state, the commit fence
	ObjectWorkspaces = "SANDBOX_WORKSPACES" // sealed channels' workspaces by channel and generation
	// BucketConsumerGroups is where orbit.go/pcgroups keeps its static
	// consumer groups' membership (its fixed name, not ours).
	BucketConsumerGroups = "static-consumer-groups"
	// Subjects is every subject of the family's own messages.
	Subjects = "sandbox.>"
)

// Streams are the family's plain streams, KVBuckets its key-value buckets
// (streams KV_<bucket>), ObjectStores its object stores (streams
// OBJ_<store>).
var (
	Streams      = []string{StreamTurns, StreamJobs, StreamJobEvents}
	KVBuckets    = []string{BucketReplies, BucketChannels, BucketJobResults, BucketJobControl, BucketConsumerGroups}
	ObjectStores = []string{ObjectWorkspaces}
)

// StreamNames is the JetStream stream behind every family stream, bucket
// and object store.
func StreamNames() []string {
	out := append([]string{}, Streams...)
	for _, b := range KVBuckets {
		out = append(out, "KV_"+b)
	}
	for _, o := range ObjectStores {
		out = append(out, "OBJ_"+o)
	}
	return out
}

// Permissions is what one box's user may publish and subscribe to.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// BoxPermissions is the least a box needs: its family subjects; on each
// family stream the JetStream API calls of streams, KV, object stores and
// pinned consumer groups (create, update, info, purge, message get and
// delete, direct get, consumers and their pulls, pauses and unpins) but
// never STREAM.DELETE, STREAM.NAMES or STREAM.LIST, and nothing of another
// stream; acks and flow-control replies of family streams; the KV and
// object-store subjects of family buckets; replies on _INBOX.
// Subscriptions: family subjects and _INBOX (API answers, KV watches,
// ordered consumers all deliver there).
func BoxPermissions() Permissions {
	pub := []string{Subjects, "$JS.API.INFO"}
	for _, s := range StreamNames() {
		pub = append(pub,
			"$JS.API.STREAM.CREATE."+s,
			"$JS.API.STREAM.UPDATE."+s,
			"$JS.API.STREAM.INFO."+s,
			"$JS.API.STREAM.PURGE."+s,
			"$JS.API.STREAM.MSG.GET."+s,
			"$JS.API.STREAM.MSG.DELETE."+s,
			"$JS.API.DIRECT.GET."+s,
			"$JS.API.DIRECT.GET."+s+".>",
			"$JS.API.CONSUMER.CREATE."+s,
			"$JS.API.CONSUMER.CREATE."+s+".>",
			"$JS.API.CONSUMER.DURABLE.CREATE."+s+".*",
			"$JS.API.CONSUMER.INFO."+s+".*",
			"$JS.API.CONSUMER.DELETE."+s+".*",
			"$JS.API.CONSUMER.MSG.NEXT."+s+".*",
			"$JS.API.CONSUMER.PAUSE."+s+".*",
			"$JS.API.CONSUMER.UNPIN."+s+".*",
			"$JS.API.CONSUMER.RESET."+s+".*",
			"$JS.API.CONSUMER.LIST."+s,
			"$JS.API.CONSUMER.NAMES."+s,
			"$JS.ACK."+s+".>",
			"$JS.FC."+s+".>",
		)
	}
	for _, b := range KVBuckets {
		pub = append(pub, "$KV."+b+".>")
	}
	for _, o := range ObjectStores {
		pub = append(pub, "$O."+o+".>")
	}
	return Permissions{Publish: pub, Subscribe: []string{Subjects, "_INBOX.>"}}
}

// FrontendPermissions is what a frontend on no box (pkg/client's fleet
// transport, its own nkey in fleet.server.frontends) needs, and nothing
// more: publish turns (sandbox.turns.*), read the turns group's membership
// (the partition count it checks), and read and watch replies by turn id;
// no other family subject (presence, jobs, approvals), no channel state,
// workspace, job or write of any bucket, no purge or delete (docs/fleet.md,
// *Security between boxes*). A turn id is 128 random bits: a frontend reads
// the replies of the ids it knows (a watch's filter is not confined by
// permissions to one key, so a frontend can list replies: it is trusted
// with the replies' text, not with anything that changes the fleet).
func FrontendPermissions() Permissions {
	groups := "KV_" + BucketConsumerGroups
	replies := "KV_" + BucketReplies
	pub := []string{
		"sandbox.turns.*",
		"$JS.API.STREAM.INFO." + groups,
		"$JS.API.STREAM.MSG.GET." + groups,
		"$JS.API.DIRECT.GET." + groups,
		"$JS.API.DIRECT.GET." + groups + ".>",
		"$JS.API.STREAM.INFO." + replies,
		"$JS.API.STREAM.MSG.GET." + replies,
		"$JS.API.DIRECT.GET." + replies,
		"$JS.API.DIRECT.GET." + replies + ".>",
		"$JS.API.CONSUMER.CREATE." + replies,
		"$JS.API.CONSUMER.CREATE." + replies + ".>",
		"$JS.API.CONSUMER.INFO." + replies + ".*",
		"$JS.API.CONSUMER.DELETE." + replies + ".*",
		"$JS.FC." + replies + ".>",
	}
	return Permissions{Publish: pub, Subscribe: []string{"_INBOX.>"}}
}
