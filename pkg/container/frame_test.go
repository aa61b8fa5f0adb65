package container

import (
	"bytes"
	"errors"
	"testing"
)

// TestBoundedWriterFrame: with accept, the writer offers the first line
// once, only when it ends what was written so far, and sends a copy of it
// when accept takes it (FinishFramed then returns at once); the bound
// holds as before.
func TestBoundedWriterFrame(t *testing.T) {
	yes := func([]byte) bool { return true }
	no := func([]byte) bool { return false }
	tests := []struct {
		name   string
		writes []string
		accept func([]byte) bool
		max    int64
		want   string // the frame sent, "" none
		err    error
	}{
		{"one write", []string{"{\"ok\":true}\n"}, yes, 100, "{\"ok\":true}\n", nil},
		{"split", []string{"{\"ok\"", ":true}", "\n"}, yes, 100, "{\"ok\":true}\n", nil},
		{"bytes after the newline", []string{"a\nb"}, yes, 100, "", nil},
		{"refused, later lines not offered", []string{"a\n", "b\n"}, no, 100, "", nil},
		{"no accept", []string{"a\n"}, nil, 100, "", nil},
		{"over the bound", []string{"aaaa", "aa\n"}, yes, 5, "", errStdoutLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offered := 0
			accept := tt.accept
			if accept != nil {
				accept = func(b []byte) bool { offered++; return tt.accept(b) }
			}
			w := &boundedWriter{max: tt.max, accept: accept, framed: make(chan []byte, 1)}
			var err error
			for _, s := range tt.writes {
				if _, err = w.Write([]byte(s)); err != nil {
					break
				}
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("write error %v, want %v", err, tt.err)
			}
			got := ""
			select {
			case f := <-w.framed:
				got = string(f)
				if len(f) > 0 && len(w.buf) > 0 && &f[0] == &w.buf[0] {
					t.Error("frame shares the writer's buffer")
				}
			default:
			}
			if got != tt.want {
				t.Errorf("frame %q, want %q", got, tt.want)
			}
			if offered > 1 {
				t.Errorf("accept asked %d times, want at most once", offered)
			}
			if tt.err == nil && !bytes.Equal(w.buf, []byte(join(tt.writes))) {
				t.Errorf("buf %q, want everything written", w.buf)
			}
		})
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for _, v := range s {
		b.WriteString(v)
	}
	return b.String()
}
