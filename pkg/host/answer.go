package host

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// turnAnswer is a turn's 200 answer: apiwire.Reply exactly as json.Marshal
// writes it, and a newline, written piece by piece so that reply files go
// out base64 straight from their bytes, never as a second copy of the
// whole answer in memory.
type turnAnswer struct {
	head  []byte // the fields before files, and `,"files":[` when there are files
	files []richproto.File
	pre   [][]byte // each file's JSON up to its data
	n     int64
}

func newTurnAnswer(r apiwire.Reply) (*turnAnswer, error) {
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
