package egress

import (
	"bytes"
	"errors"
	"io"
	"sync/atomic"
	"testing"
)

// pieces hands out its parts one a read, the last with err.
type pieces struct {
	parts [][]byte
	err   error
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.parts) == 0 {
		return 0, p.err
	}
	n := copy(b, p.parts[0])
	p.parts[0] = p.parts[0][n:]
	if len(p.parts[0]) == 0 {
		p.parts = p.parts[1:]
		if len(p.parts) == 0 {
			return n, p.err
		}
	}
	return n, nil
}

// TestReadAhead: what the source handed out, in order, then its error
// (also with the last data), however the reads are cut; an answer that
// ends within readAheadAfter starts no goroutine.
func TestReadAhead(t *testing.T) {
	errEnd := errors.New("the source's own error")
	var want []byte
	var parts [][]byte
	for i := range 12 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*997%(readAheadBytes+5))
		parts, want = append(parts, p), append(want, p...)
	}
	for _, size := range []int{7, 4096, readAheadBytes, 3 * readAheadBytes} {
		r := newReadAhead(&pieces{parts: append([][]byte(nil), parts...), err: errEnd})
		var got []byte
		buf := make([]byte, size)
		var err error
		for err == nil {
			var n int
			n, err = r.Read(buf)
			got = append(got, buf[:n]...)
		}
		if !errors.Is(err, errEnd) || !bytes.Equal(got, want) {
			t.Fatalf("reads of %d: %d bytes (%v), want %d and the source's error", size, len(got), err, len(want))
		}
		if n, err := r.Read(buf); n != 0 || !errors.Is(err, errEnd) {
			t.Fatalf("after the end: %d %v", n, err)
		}
		if r.pending() {
			t.Fatal("pending after the end")
		}
		r.stop()
	}
	small := bytes.Repeat([]byte("s"), readAheadAfter-1)
	r := newReadAhead(&pieces{parts: [][]byte{small[:10], small[10:]}, err: io.EOF})
	if b, err := io.ReadAll(r); !bytes.Equal(b, small) || err != nil || r.ch != nil {
		t.Fatalf("a small answer: %d bytes %v, goroutine started: %v", len(b), err, r.ch != nil)
	}
}

// endless fills every read until released, then fails.
type endless struct {
	release chan struct{}
	reading atomic.Int32
}

func (b *endless) Read(p []byte) (int, error) {
	b.reading.Add(1)
	defer b.reading.Add(-1)
	select {
	case <-b.release:
		return 0, errSourceClosed
	default:
	}
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

var errSourceClosed = errors.New("closed")

// TestReadAheadStop: stop returns only once nothing reads the source.
func TestReadAheadStop(t *testing.T) {
	src := &endless{release: make(chan struct{})}
	r := newReadAhead(src)
	buf := make([]byte, 4<<10)
	for r.ch == nil { // past readAheadAfter: the goroutine reads
		if _, err := r.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if !r.pending() {
		t.Fatal("not pending while the source has more")
	}
	close(src.release) // the destination connection closed
	r.stop()
	if n := src.reading.Load(); n != 0 {
		t.Fatalf("%d reads of the source after stop", n)
	}
}
