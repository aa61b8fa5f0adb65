// Package fleetworkspace is the fleet's workspace store: the channels'
// committed workspace snapshots in the SANDBOX_WORKSPACES object store, read
// back within their bound, deleted without leaving a delete marker, and
// swept of what a crash left (docs/fleet.md, *Workspaces*); and a box's
// record of which snapshot each local workspace is (LocalCopies).
// Guarantee: a snapshot is read only up to MaxBytes; a sweep removes only
// what the caller says no channel refers to and was last written more than
// its age before the store's latest write (the engine's clock, never a
// box's); what it cannot read it keeps.
package fleetworkspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the object store of committed snapshots.
const Bucket = "SANDBOX_WORKSPACES"

// MaxBytes bounds one channel's workspace snapshot.
const MaxBytes = 64 << 20

// ErrTooLarge: a stored snapshot is over MaxBytes.
var ErrTooLarge = errors.New("workspace snapshot over its bound")

// Store is a bound workspace store: the object store and its stream (the
// stream for purging delete markers and sweeping).
type Store struct {
	objects jetstream.ObjectStore
	stream  jetstream.Stream
}

// Bind binds the existing store (the fleet's Ensure makes it).
func Bind(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	objects, err := js.ObjectStore(ctx, Bucket)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", Bucket, err)
	}
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", Bucket, err)
	}
	return &Store{objects: objects, stream: stream}, nil
}

// Put stores a snapshot under its name; one that takes longer than
// TransferBound of its size fails with ErrStalled (its chunks' acks
// awaited from a leader that died: measured, each such upload waited out
// the box's whole 10 s deadline).
func (s *Store) Put(ctx context.Context, name string, data []byte) error {
	pctx, cancel := context.WithTimeout(ctx, TransferBound(uint64(len(data))))
	defer cancel()
	_, err := s.objects.PutBytes(pctx, name, data)
	return stalled(ctx, pctx, name, err)
}

// stalled names a call that ran out of its own bound (inner) but not of
// the caller's (outer) ErrStalled.
func stalled(outer, inner context.Context, name string, err error) error {
	if err != nil && inner.Err() != nil && outer.Err() == nil {
		return fmt.Errorf("workspace %s: %w", name, ErrStalled)
	}
	return err
}

// ErrStalled: a snapshot's read or upload did not finish within its bound
// (TransferBound): the stream's leader died or is being elected meanwhile.
var ErrStalled = errors.New("workspace snapshot read stalled")

// TransferBound bounds reading or uploading a snapshot of size bytes: 5 s, plus a second
// for every 4 MiB. An object's chunks come through an ordered consumer
// that, created while the store's stream had no leader (a killed or cut
// server), never delivers, and the read would wait out its whole
// deadline; measured, a 30 s wait there made the fleet's 40 s failovers
// (docs/fleet.md, *Failure model*). Bounded by size, a read can be tried
// again at once.
func TransferBound(size uint64) time.Duration {
	return readBase + time.Duration(size/(4<<20))*time.Second
}

// readBase is TransferBound's base (a variable for the stall test only).
var readBase = 5 * time.Second

// Get returns a snapshot by its name (nil for ""), refusing one over
// MaxBytes (ErrTooLarge); a read that takes longer than TransferBound of its
// size fails with ErrStalled.
func (s *Store) Get(ctx context.Context, name string) ([]byte, error) {
	if name == "" {
		return nil, nil
	}
	ictx, cancel := context.WithTimeout(ctx, readBase)
	info, err := s.objects.GetInfo(ictx, name)
	err = stalled(ctx, ictx, name, err)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	if info.Size > MaxBytes {
		return nil, fmt.Errorf("workspace %s exceeds %d bytes: %w", name, MaxBytes, ErrTooLarge)
	}
	rctx, cancel := context.WithTimeout(ctx, TransferBound(info.Size))
	defer cancel()
	data, err := s.read(rctx, name)
	if err := stalled(ctx, rctx, name, err); err != nil {
		return nil, err
	}
	return data, nil
}

func (s *Store) read(ctx context.Context, name string) ([]byte, error) {
	r, err := s.objects.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("workspace %s exceeds %d bytes: %w", name, MaxBytes, ErrTooLarge)
	}
	return data, nil
}

// Status asks the store's stream leader for the store's status (a probe).
func (s *Store) Status(ctx context.Context) error {
	_, err := s.objects.Status(ctx)
	return err
}
