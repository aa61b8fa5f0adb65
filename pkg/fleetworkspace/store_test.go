package fleetworkspace

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// electedAwayStore is an object store whose chunks never come: the
// ordered consumer of a Get was made while the stream had no leader.
type electedAwayStore struct{ jetstream.ObjectStore }

func (electedAwayStore) GetInfo(_ context.Context, name string, _ ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error) {
	return &jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: name}, Size: 10, Chunks: 1}, nil
}

func (electedAwayStore) Get(ctx context.Context, _ string, _ ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error) {
	return silentResult{ctx}, nil
}

type silentResult struct{ ctx context.Context }

func (r silentResult) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}
func (silentResult) Close() error                         { return nil }
func (silentResult) Info() (*jetstream.ObjectInfo, error) { return nil, nil }
func (silentResult) Error() error                         { return nil }

// TestStalledReadFailsWithinItsBound: a snapshot whose chunks never come
// fails with ErrStalled after TransferBound, long before the caller's
// deadline, so the box can try it again (docs/fleet.md, *Failure model*).
func TestStalledReadFailsWithinItsBound(t *testing.T) {
	old := readBase
	readBase = 50 * time.Millisecond
	t.Cleanup(func() { readBase = old })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &Store{objects: electedAwayStore{}}
	_, err := s.Get(ctx, "c.x.1.1")
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("Get: %v, want ErrStalled", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the caller's deadline ran out first: %v", ctx.Err())
	}
}

func TestTransferBound(t *testing.T) {
	for _, c := range []struct {
		size uint64
		want time.Duration
	}{{0, readBase}, {4 << 20, readBase + time.Second}, {MaxBytes, readBase + 16*time.Second}} {
		if got := TransferBound(c.size); got != c.want {
			t.Errorf("TransferBound(%d) = %s, want %s", c.size, got, c.want)
		}
	}
}
