// Package turnanswer writes a turn's 200 answer to the host API's client
// (docs/api.md, the turn route): apiwire.Reply as json.Marshal writes it,
// streamed from the reply files' own bytes.
// Guarantee: the answer is byte for byte json.Marshal's with a newline and
// its announced length; it is never held whole beside the files; a client
// that stops reading loses it at the write deadline, logged as its fault.
package turnanswer

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// Answer is a turn's 200 answer: apiwire.Reply exactly as json.Marshal
// writes it, and a newline, written piece by piece so that reply files go
// out base64 straight from their bytes, never as a second copy of the
// whole answer in memory.
type Answer struct {
	head  []byte // the fields before files, and `,"files":[` when there are files
	files []richproto.File
	pre   [][]byte // each file's JSON up to its data
	n     int64
}

// New makes r's answer; it holds r's files, not their encoding.
func New(r apiwire.Reply) (*Answer, error) {
	files := r.Files
	r.Files = nil
	head, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	a := &Answer{files: files}
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
func (a *Answer) Len() int64 { return a.n }

// WriteTo writes the answer to w.
func (a *Answer) WriteTo(w io.Writer) (int64, error) {
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

// CutMsg is the log message of an answer cut at the write deadline.
const CutMsg = "turn answer cut: the client stopped reading"

// Write writes reply as the turn's 200 response whole, with its length,
// and flushes it, so the client has the complete body while the caller
// still runs the turn's cleanup. Writing is bounded by timeout: a client
// that stops reading (a rich answer may carry 67 MiB of reply files) must
// not hold the turn, and its channel, forever. An error is returned only
// when nothing was written (the caller answers it); a write that fails is
// logged with turn and the peer's uid, blaming the client.
func Write(w http.ResponseWriter, reply apiwire.Reply, timeout time.Duration, log *slog.Logger, peerUID int) error {
	// Streamed from the files' bytes: the answer is never held whole
	// beside them.
	body, err := New(reply)
	if err != nil { // strings, bytes and a bool: cannot happen
		return err
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Length", strconv.FormatInt(body.Len(), 10))
	// The server reads this connection's next request only once the handler
	// returned, after cleanup: a client reusing it would wait for that
	// cleanup. Closing it sends the client's next request (another
	// channel's turn, a status call) to a fresh connection.
	hd.Set("Connection", "close")
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout))
	w.WriteHeader(http.StatusOK)
	if _, err := body.WriteTo(w); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The client's fault, and the turn's answer is lost: say so.
			log.Warn(CutMsg, "turn", reply.TurnID, "peer_uid", peerUID, "write_timeout_s", timeout.Seconds())
			return nil
		}
		log.Debug("turn reply not delivered", "turn", reply.TurnID, "err", err) // the client left
		return nil
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}
