// Package fleet runs a family's turns across boxes on NATS JetStream
// (DESIGN.md section 17): a box publishes each admitted turn to stream
// SANDBOX_TURNS on subject sandbox.turns.<partition> (the partition a stable
// hash of the channel key, Nats-Msg-Id the turn id), one box per partition
// takes it through a pinned partitioned consumer group (pcgroups), executes
// it and commits; the box the frontend talked to watches the turn's key in
// KV SANDBOX_REPLIES and answers.
//
// Guarantee: a channel's turns are taken one at a time, in stream order
// (one consumer per partition, at most one unacknowledged turn); execution
// is at least once, the committed effect exactly once: a turn commits only
// by a compare-and-swap on KV SANDBOX_CHANNELS at the revision of the claim
// the box wrote when it took the turn, so once another box has claimed the
// turn (its pin moved: a cut link, a paused process) the old owner's commit
// is refused and its work dropped. Each turn id gets exactly one reply, the
// committed one, written create-only; the turn is acknowledged only after
// its commit. A channel's workspace snapshot is committed with its turn into
// Object Store SANDBOX_WORKSPACES, keyed by channel and generation. A
// channel's mode lives in SANDBOX_CHANNELS under a key of its own, written
// by compare-and-swap and read when a turn is taken: a mode change never
// fences a turn's commit, and no commit overwrites one. Every value is
// measured as its bucket stores it before the commit (a reply that would
// not fit commits as failed), and a turn delivered more often than its
// bound is failed or given up on every path, so no turn holds its
// partition for ever. Ask retries a publish whose outcome is unknown under
// the same turn id and answers a committed turn with its reply.
//
// Runs, prechecks and delegated jobs go through the work queue
// SANDBOX_JOBS (jobs.go, jobworker.go, approvals.go): a box pulls a job only
// while it holds a free admission slot, one job per slot; its frames go back
// on SANDBOX_JOBEVENTS in order, its result is written create-only to KV
// SANDBOX_JOBRESULTS (one result per job, however often it was delivered),
// a cancel and a run's approval (decided once, by compare-and-swap, from
// any box) live in KV SANDBOX_JOBCONTROL; a job delivered past the bound is
// given up. Credentials and policies never pass through this package.
package fleet
