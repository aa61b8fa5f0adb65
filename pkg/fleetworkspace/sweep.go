package fleetworkspace

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The workspace store's layout as nats.go's object store writes it: one
// meta subject per object name (base64url), one chunk subject per upload
// (its NUID). Snapshot names are unique per commit (the fleet names them so), so
// every delete would leave a delete marker on a subject of its own for
// ever: Delete purges it (docs/fleet.md, *Workspaces*).
const (
	streamName     = "OBJ_" + Bucket
	streamSubjects = "$O." + Bucket + ".>"
	metaPrefix     = "$O." + Bucket + ".M."
	chunkPrefix    = "$O." + Bucket + ".C."
)

// The sweep of what a crash left in the workspace store (docs/fleet.md,
// *Workspaces*): every box sweeps every DefaultSweepInterval (plus up to a
// quarter of it at random, so boxes started together do not sweep
// together; a sweep is idempotent), removing what no channel refers to and
// was last written more than DefaultSweepAge before the store's latest
// write. The age is read on the engine's clock (the stream's timestamps),
// never a box's. A commit lands within opTimeout of its upload's start (the
// upload and the commit share that deadline), so an hour never removes an
// upload whose commit may still land.
const (
	DefaultSweepAge      = time.Hour
	DefaultSweepInterval = 15 * time.Minute
)

// Sweep counts what a sweep removed: Snapshots whole snapshots no channel
// refers to (a crash between upload and commit, or before the superseded
// snapshot was deleted), Markers delete markers (left by a crash between
// delete and purge, or by a version before the purge), Uploads chunks of
// uploads no object names (a crash mid-upload: up to MaxWorkspaceBytes).
type Sweep struct{ Snapshots, Markers, Uploads int }

func metaSubject(name string) string {
	return metaPrefix + base64.URLEncoding.EncodeToString([]byte(name))
}

// Delete removes a snapshot and the delete marker the object store
// leaves on its meta subject.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.objects.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	return s.stream.Purge(ctx, jetstream.WithPurgeSubject(metaSubject(name)))
}

// objMeta is what the sweep reads of an object's meta message.
type objMeta struct {
	Name    string `json:"name"`
	NUID    string `json:"nuid"`
	Deleted bool   `json:"deleted,omitempty"`
}

// Referenced reports whether a snapshot is still its channel's, or that
// cannot be known (then the sweep keeps it).
type Referenced func(ctx context.Context, name string) bool

// Sweep removes from the store what referenced says no channel refers to
// and was last written more than age before the store's latest write:
// whole snapshots, delete markers (at any age) and the chunks of uploads
// no object names. What it cannot read (a channel's state, a message) it
// keeps.
func (s *Store) Sweep(ctx context.Context, age time.Duration, referenced Referenced) (Sweep, error) {
	var sw Sweep
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(streamSubjects))
	if err != nil {
		return sw, fmt.Errorf("sweep %s: %w", Bucket, err)
	}
	latest := info.State.LastTime
	old := func(t time.Time) bool { return !t.Add(age).After(latest) }
	live := map[string]bool{} // NUIDs of objects kept
	var chunks []string
	for subj := range info.State.Subjects {
		if strings.HasPrefix(subj, chunkPrefix) {
			chunks = append(chunks, subj)
			continue
		}
		if !strings.HasPrefix(subj, metaPrefix) {
			continue
		}
		m, err := s.stream.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			return sw, fmt.Errorf("sweep %s: %w", Bucket, err)
		}
		var meta objMeta
		if json.Unmarshal(m.Data, &meta) != nil {
			continue // not the object store's: kept
		}
		if meta.Deleted {
			if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
				return sw, fmt.Errorf("sweep %s: %w", Bucket, err)
			}
			sw.Markers++
			continue
		}
		if !old(m.Time) || referenced(ctx, meta.Name) {
			live[meta.NUID] = true
			continue
		}
		if err := s.Delete(ctx, meta.Name); err != nil {
			return sw, fmt.Errorf("sweep %s: %w", Bucket, err)
		}
		sw.Snapshots++
	}
	for _, subj := range chunks {
		if live[strings.TrimPrefix(subj, chunkPrefix)] {
			continue
		}
		m, err := s.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged since (a snapshot swept above)
		}
		if err != nil {
			return sw, fmt.Errorf("sweep %s: %w", Bucket, err)
		}
		if !old(m.Time) {
			continue // an upload under way, or its meta not yet written
		}
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return sw, fmt.Errorf("sweep %s: %w", Bucket, err)
		}
		sw.Uploads++
	}
	return sw, nil
}

// Sweeper sweeps the store every interval (plus jitter) until ctx ends.
func (s *Store) Sweeper(ctx context.Context, interval, age time.Duration, referenced Referenced, log *slog.Logger) {
	for {
		t := time.NewTimer(interval + rand.N(interval/4+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		sctx, cancel := context.WithTimeout(ctx, sweepTimeout)
		sw, err := s.Sweep(sctx, age, referenced)
		cancel()
		switch {
		case err != nil:
			log.Warn("fleet workspace sweep failed on the cluster: next one in an interval", "err", err)
		case sw != (Sweep{}):
			log.Info("fleet workspace sweep removed what crashes left", "snapshots", sw.Snapshots, "markers", sw.Markers, "uploads", sw.Uploads)
		}
	}
}

// sweepTimeout bounds one sweep (a listing and a read per object).
const sweepTimeout = time.Minute
