package host

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// replyWriteTimeout bounds writing a turn's answer (a var for tests).
var replyWriteTimeout = 2 * time.Minute

// replyBudgetBytes bounds the reply packets the host holds at once: two
// packets at their bound (a var for tests). A packet reserves its length
// before its body is read (pkg/richsession/control.go), keeps its files' bytes until
// its answer is written, and waits, within its turn's deadline, while
// other packets hold the budget.
var replyBudgetBytes int64 = 2 * richproto.MaxPacketBytes

// replyBudget is a counting bound on reply packet bytes in flight.
type replyBudget struct {
	max int64
	log *slog.Logger

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced at each release
	waiting func(n int64) // test hook: a packet of n bytes waits
}

func newReplyBudget(max int64, log *slog.Logger) *replyBudget {
	return &replyBudget{max: max, log: log, changed: make(chan struct{})}
}

// acquire takes n bytes, waiting while they do not fit, until ctx ends.
func (b *replyBudget) acquire(ctx context.Context, n int64) error {
	n = min(n, b.max)
	logged := false
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		used, changed, hook := b.used, b.changed, b.waiting
		b.mu.Unlock()
		if !logged {
			logged = true
			b.log.Info("reply packet waits for the host's reply budget", "bytes", n, "held", used, "budget", b.max)
			if hook != nil {
				hook(n)
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("reply packet of %d bytes waited for the host's reply budget (%d of %d bytes held by other packets) until the turn ended: %w",
				n, used, b.max, context.Cause(ctx))
		}
	}
}

// release gives n bytes back.
func (b *replyBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= min(n, b.max)
	close(b.changed)
	b.changed = make(chan struct{})
}

// turnAnswer is a turn's 200 answer: TurnResponse exactly as json.Marshal
// writes it, and a newline, written piece by piece so that reply files go
// out base64 straight from their bytes, never as a second copy of the
// whole answer in memory.
type turnAnswer struct {
	head  []byte // the fields before files, and `,"files":[` when there are files
	files []richproto.File
	pre   [][]byte // each file's JSON up to its data
	n     int64
}

func newTurnAnswer(r TurnResponse) (*turnAnswer, error) {
	files := r.Files
	r.Files = nil
	head, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	a := &turnAnswer{files: files}
	if len(files) == 0 {
		a.head = append(head, '\n')
		a.n = int64(len(a.head))
		return a, nil
	}
	a.head = append(head[:len(head)-1], `,"files":[`...)
	a.n = int64(len(a.head)) + int64(len("]}\n"))
	for i, f := range files {
		name, err := json.Marshal(f.Name)
		if err != nil {
			return nil, err
		}
		p := append([]byte(`{"name":`), name...)
		if f.Type != "" {
			typ, err := json.Marshal(f.Type)
			if err != nil {
				return nil, err
			}
			p = append(append(p, `,"type":`...), typ...)
		}
		p = append(p, `,"data":`...)
		if i > 0 {
			p = append([]byte{','}, p...)
		}
		a.pre = append(a.pre, p)
		a.n += int64(len(p))
		if f.Data == nil {
			a.n += int64(len("null}"))
		} else {
			a.n += int64(base64.StdEncoding.EncodedLen(len(f.Data)) + len(`""}`))
		}
	}
	return a, nil
}

// Len is the answer's length in bytes.
func (a *turnAnswer) Len() int64 { return a.n }

// WriteTo writes the answer to w.
func (a *turnAnswer) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	bw.Write(a.head)
	for i, f := range a.files {
		bw.Write(a.pre[i])
		if f.Data == nil {
			bw.WriteString("null}")
			continue
		}
		bw.WriteByte('"')
		enc := base64.NewEncoder(base64.StdEncoding, bw)
		enc.Write(f.Data)
		enc.Close()
		bw.WriteString(`"}`)
	}
	if len(a.files) > 0 {
		bw.WriteString("]}\n")
	}
	err := bw.Flush() // a bufio.Writer keeps its first error
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
