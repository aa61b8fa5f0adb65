package egress

import "io"

// readAhead reads an intercepted answer's guarded body on a goroutine of
// its own while the caller writes what came before it to the code: the
// destination's TLS and the reflection guard on one core, the code's TLS
// on another (issue 37's 1 MiB cost). It hands out exactly what the
// guarded reader handed it, in order, then its error; nothing the guard
// held back or refused. The first readAheadAfter bytes are read in the
// caller: an answer that ends there (a small chunked one) never starts the
// goroutine nor takes its buffers. At most readAheadBuffers reads of
// readAheadBytes are held.
type readAhead struct {
	src     io.Reader
	started bool  // read at all
	n       int64 // read in the caller
	made    int   // buffers made
	ch      chan aheadChunk
	free    chan []byte
	done    chan struct{}
	exited  chan struct{}
	cur     []byte // what is being handed out: buf[off:]
	buf     []byte
	err     error // the source's error, after cur
}

type aheadChunk struct {
	b   []byte
	err error
}

const (
	readAheadAfter   = 64 << 10
	readAheadBuffers = 3
	readAheadBytes   = 32 << 10
)

func newReadAhead(src io.Reader) *readAhead { return &readAhead{src: src} }

func (r *readAhead) Read(p []byte) (int, error) {
	r.started = true
	if r.ch == nil {
		if r.err != nil {
			return 0, r.err
		}
		if r.n < readAheadAfter {
			n, err := r.src.Read(p)
			r.n += int64(n)
			r.err = err
			return n, err
		}
		r.start()
	}
	for len(r.cur) == 0 {
		if r.buf != nil {
			r.free <- r.buf // never blocks: free holds every buffer
			r.buf = nil
		}
		if r.err != nil {
			return 0, r.err
		}
		c := <-r.ch
		r.buf, r.cur, r.err = c.b, c.b, c.err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *readAhead) start() {
	r.ch = make(chan aheadChunk, readAheadBuffers)
	r.free = make(chan []byte, readAheadBuffers)
	r.done, r.exited = make(chan struct{}), make(chan struct{})
	go r.run()
}

func (r *readAhead) run() {
	defer close(r.exited)
	for {
		var b []byte
		select {
		case b = <-r.free:
		case <-r.done:
			return
		default:
			if r.made < readAheadBuffers {
				r.made++
				b = make([]byte, readAheadBytes)
				break
			}
			select {
			case b = <-r.free:
			case <-r.done:
				return
			}
		}
		n, err := r.src.Read(b)
		select {
		case r.ch <- aheadChunk{b[:n], err}:
		case <-r.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// pending reports whether the source was read but its end (an error) not
// handed out: the goroutine may still be reading it, and the source must
// be ended (the destination connection closed) before stop.
func (r *readAhead) pending() bool { return r.started && r.err == nil }

// stop ends the goroutine, if any, and waits for it: after stop nothing
// reads the source.
func (r *readAhead) stop() {
	if r.ch != nil {
		close(r.done)
		<-r.exited
		r.ch = nil
	}
}
