package egress

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// budget is a byte bound shared by every connection of a turn.
type budget struct {
	max  int64
	used atomic.Int64
}

// take reserves up to want bytes and returns how many it got (0: spent).
func (b *budget) take(want int) int {
	for {
		cur := b.used.Load()
		left := b.max - cur
		if left <= 0 {
			return 0
		}
		n := min(int64(want), left)
		if b.used.CompareAndSwap(cur, cur+n) {
			return int(n)
		}
	}
}

// refund returns reserved bytes that were not moved.
func (b *budget) refund(n int) {
	if n > 0 {
		b.used.Add(-int64(n))
	}
}

func (b *budget) spent() bool { return b.used.Load() >= b.max }

// dial is the proxy's one way to a destination: a connection slot, then
// safefetch.Dialer (vet, pin, connect), then the counting wrapper that
// holds the slot, the byte budgets and the lifetime until Close.
func (p *Proxy) dial(ctx context.Context, kind, dest string) (*conn, error) {
	if p.out.spent() || p.in.spent() {
		return nil, ErrBytes
	}
	if p.open.Add(1) > int64(p.grant.MaxConnections) {
		p.open.Add(-1)
		return nil, ErrConnections
	}
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	c, err := p.dialer.DialContext(dctx, "tcp", dest)
	cancel()
	if err != nil {
		p.open.Add(-1)
		return nil, err
	}
	w := &conn{Conn: c, p: p, kind: kind, dest: dest, start: p.now()}
	w.timer = time.AfterFunc(p.lifetime(), func() { w.end(ErrLifetime); _ = w.Close() })
	return w, nil
}

// conn is one destination connection: every byte through it is charged to
// the turn's budgets, and Close releases the slot and logs the connection.
type conn struct {
	net.Conn
	p          *Proxy
	kind, dest string
	start      time.Time
	timer      *time.Timer
	out, in    atomic.Int64
	reason     atomic.Pointer[error] // first cause of the end, if not a plain close
	once       sync.Once
}

func (c *conn) end(err error) { c.reason.CompareAndSwap(nil, &err) }

// Read charges what arrived after the read, never while waiting: a tunnel
// idling in Read must not hold budget another one needs. What arrives past
// the budget is dropped with the connection, so the guest never gets more
// than the bound.
func (c *conn) Read(b []byte) (int, error) {
	if len(b) > 0 && c.p.in.spent() {
		c.end(ErrBytes)
		_ = c.Close()
		return 0, ErrBytes
	}
	n, err := c.Conn.Read(b)
	if n == 0 {
		return 0, err
	}
	got := c.p.in.take(n)
	c.in.Add(int64(got))
	if got < n {
		c.end(ErrBytes)
		_ = c.Close()
		return got, ErrBytes
	}
	return n, err
}

// Write reserves before it sends (a write does not wait for the
// destination, only for buffer space) and sends no byte past the budget.
func (c *conn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return c.Conn.Write(b)
	}
	k := c.p.out.take(len(b))
	if k == 0 {
		c.end(ErrBytes)
		_ = c.Close()
		return 0, ErrBytes
	}
	n, err := c.Conn.Write(b[:k])
	c.p.out.refund(k - n)
	c.out.Add(int64(n))
	if err == nil && k < len(b) {
		// Only part of b fit the budget: the rest is never sent.
		c.end(ErrBytes)
		_ = c.Close()
		err = ErrBytes
	}
	return n, err
}

// CloseWrite half-closes a TCP destination connection.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection once, frees its slot and logs it: the
// destination as asked, the vetted address, bytes each way, duration and
// what ended it. Never a payload. The line is written when the connection
// ends (it carries the totals), so after the guest has an answer that did
// not wait for the end; it is Close's last act, after the slot is free.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.timer.Stop()
		c.p.open.Add(-1)
		attrs := []any{"kind", c.kind, "dest", c.dest, "addr", c.Conn.RemoteAddr().String(),
			"bytes_out", c.out.Load(), "bytes_in", c.in.Load(),
			"duration_ms", c.p.now().Sub(c.start).Milliseconds()}
		if r := c.reason.Load(); r != nil && !errors.Is(*r, errTurnOver) {
			c.p.log.Warn("egress connection cut", append(attrs, "reason", (*r).Error())...)
			return
		} else if r != nil {
			attrs = append(attrs, "reason", (*r).Error())
		}
		c.p.log.Info("egress connection", attrs...)
	})
	return err
}
