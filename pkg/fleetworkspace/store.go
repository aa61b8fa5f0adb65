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

// Put stores a snapshot under its name.
func (s *Store) Put(ctx context.Context, name string, data []byte) error {
	_, err := s.objects.PutBytes(ctx, name, data)
	return err
}

// Get returns a snapshot by its name (nil for ""), refusing one over
// MaxBytes (ErrTooLarge).
func (s *Store) Get(ctx context.Context, name string) ([]byte, error) {
	if name == "" {
		return nil, nil
	}
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
