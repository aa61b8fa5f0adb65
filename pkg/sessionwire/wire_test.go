package sessionwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func execReq(id string, e Exec) Request {
	if e.MaxOutputBytes == 0 {
		e.MaxOutputBytes = 1 << 10
	}
	return Request{ID: id, Op: OpExec, Exec: &e}
}

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name string
		r    Request
		ok   bool
	}{
		{"shell", execReq("a", Exec{Command: "true"}), true},
		{"argv", execReq("a", Exec{Executable: "python3", Args: []string{"-c", "1"}}), true},
		{"both modes", execReq("a", Exec{Command: "x", Executable: "y"}), false},
		{"neither", execReq("a", Exec{}), false},
		{"args with command", execReq("a", Exec{Command: "x", Args: []string{"y"}}), false},
		{"nul", execReq("a", Exec{Command: "x\x00"}), false},
		{"bad id", execReq("a b", Exec{Command: "x"}), false},
		{"empty id", execReq("", Exec{Command: "x"}), false},
		{"denied env", execReq("a", Exec{Command: "x", Env: map[string]string{"LD_PRELOAD": "/x.so"}}), false},
		{"allowed env", execReq("a", Exec{Command: "x", Env: map[string]string{"FOO_1": "bar"}}), true},
		{"timeout over", execReq("a", Exec{Command: "x", TimeoutSeconds: MaxTimeoutSeconds + 1}), false},
		{"no output bound", Request{ID: "a", Op: OpExec, Exec: &Exec{Command: "x"}}, false},
		{"stdin over", execReq("a", Exec{Command: "x", Stdin: make([]byte, MaxStdinBytes+1)}), false},
		{"cwd escapes", execReq("a", Exec{Command: "x", Cwd: "../etc"}), false},
		{"signal", Request{ID: "s", Op: OpSignal, Signal: &Signal{Target: "a", Name: SignalTerm}}, true},
		{"signal unknown", Request{ID: "s", Op: OpSignal, Signal: &Signal{Target: "a", Name: "STOP"}}, false},
		{"put", Request{ID: "p", Op: OpPut, File: &File{Path: "a/b", Size: 3, Mode: 0o755}}, true},
		{"put over", Request{ID: "p", Op: OpPut, File: &File{Path: "a", Size: MaxPutBytes + 1}}, false},
		{"put setuid", Request{ID: "p", Op: OpPut, File: &File{Path: "a", Mode: 0o4755}}, false},
		{"get with size", Request{ID: "g", Op: OpGet, File: &File{Path: "a", Size: 1}}, false},
		{"two objects", Request{ID: "g", Op: OpGet, File: &File{Path: "a"}, Signal: &Signal{Target: "a", Name: "KILL"}}, false},
		{"op mismatch", Request{ID: "g", Op: OpExec, File: &File{Path: "a"}}, false},
		{"unknown op", Request{ID: "g", Op: "chmod", File: &File{Path: "a"}}, false},
		{"list root", Request{ID: "l", Op: OpList, File: &File{Path: "."}}, true},
		{"getdir output", Request{ID: "l", Op: OpGetDir, File: &File{Path: "/output"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.r.Validate()
			if got := err == nil; got != tt.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
		})
	}
}

func TestValidEnvName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"FOO", true}, {"foo_bar9", true}, {"_X", true}, {"PYTHONPATH", true}, {"NODE_ENV", true},
		{"", false}, {"9A", false}, {"A-B", false}, {"A=B", false}, {strings.Repeat("A", MaxEnvNameBytes+1), false},
		{"PATH", false}, {"HOME", false}, {"USER", false}, {"IFS", false}, {"BASH_ENV", false}, {"ENV", false},
		{"LD_PRELOAD", false}, {"LD_LIBRARY_PATH", false}, {"BASH_FUNC_x%%", false}, {"HTTPS_PROXY", false},
		{"https_proxy", false}, {"NO_PROXY", false}, {"GIT_CONFIG_COUNT", false}, {"SANDBOX_X", false}, {"GCONV_PATH", false},
	} {
		if got := ValidEnvName(tt.name) == nil; got != tt.ok {
			t.Errorf("ValidEnvName(%q) ok = %v, want %v", tt.name, got, tt.ok)
		}
	}
}

func TestSplitPath(t *testing.T) {
	for _, tt := range []struct {
		p, root, rel string
		ok           bool
	}{
		{"a", RootWork, "a", true},
		{"a/b/c.txt", RootWork, "a/b/c.txt", true},
		{".", RootWork, ".", true},
		{"/output", RootOutput, ".", true},
		{"/output/r.txt", RootOutput, "r.txt", true},
		{"/tmp/x/y", RootTmp, "x/y", true},
		{"/etc/passwd", "", "", false},
		{"/outputx/a", "", "", false},
		{"/", "", "", false},
		{"../a", "", "", false},
		{"a/../b", "", "", false},
		{"a/./b", "", "", false},
		{"a/", "", "", false},
		{"a//b", "", "", false},
		{"/tmp/..", "", "", false},
		{"", "", "", false},
		{"a\x00b", "", "", false},
		{strings.Repeat("a", MaxNameBytes+1), "", "", false},
	} {
		root, rel, err := SplitPath(tt.p)
		if got := err == nil; got != tt.ok || root != tt.root || rel != tt.rel {
			t.Errorf("SplitPath(%q) = %q, %q, %v; want %q, %q, ok %v", tt.p, root, rel, err, tt.root, tt.rel, tt.ok)
		}
	}
}

func TestRequestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	enc := NewRequestEncoder(&buf)
	data := bytes.Repeat([]byte("x"), DataChunk*2+7)
	reqs := []Request{
		execReq("e1", Exec{Command: "echo hi", Env: map[string]string{"A": "b"}, Stdin: []byte{0, 1, 2}}),
		{ID: "p1", Op: OpPut, File: &File{Path: "f", Size: int64(len(data))}},
		{ID: "p2", Op: OpPut, File: &File{Path: "g", Size: 4}},
		{ID: "g1", Op: OpGet, File: &File{Path: "f"}},
	}
	if err := enc.Request(reqs[0]); err != nil {
		t.Fatal(err)
	}
	if err := enc.Put(reqs[1], data); err != nil {
		t.Fatal(err)
	}
	if err := enc.Put(reqs[2], []byte("abcd")); err != nil {
		t.Fatal(err)
	}
	if err := enc.Request(reqs[3]); err != nil {
		t.Fatal(err)
	}
	d := NewRequestDecoder(&buf)
	for i, want := range reqs {
		got, err := d.Next()
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got.ID != want.ID || got.Op != want.Op {
			t.Fatalf("request %d = %+v, want %+v", i, got, want)
		}
		if i == 1 {
			b, err := io.ReadAll(d.Data())
			if err != nil || !bytes.Equal(b, data) {
				t.Fatalf("put data: %d bytes, %v", len(b), err)
			}
		}
		// request 2's data is left unread: Next skips it.
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("after the last request: %v, want EOF", err)
	}
}

func frame(t Type, payload []byte) []byte {
	b := []byte{byte(t)}
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

func TestRequestDecoderRefuses(t *testing.T) {
	put := frame(FrameRequest, []byte(`{"id":"p","op":"put","file":{"path":"f","size":3}}`))
	huge := []byte{byte(FrameRequest), 0xff, 0xff, 0xff, 0xff}
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"unknown field", frame(FrameRequest, []byte(`{"id":"a","op":"get","file":{"path":"f"},"x":1}`))},
		{"trailing", frame(FrameRequest, []byte(`{"id":"a","op":"get","file":{"path":"f"}} {}`))},
		{"not an object", frame(FrameRequest, []byte(`[1]`))},
		{"invalid request, invalid id", frame(FrameRequest, []byte(`{"id":"../f","op":"get","file":{"path":"f"}}`))},
		{"put over the bound", frame(FrameRequest, []byte(`{"id":"p","op":"put","file":{"path":"f","size":67108865}}`))},
		{"event type", frame(FrameEvent, []byte(`{}`))},
		{"huge request", huge},
		{"data without put", frame(FramePutData, []byte("abc"))},
		{"short put", append(append([]byte{}, put...), frame(FramePutData, []byte("ab"))...)},
		{"long put", append(append([]byte{}, put...), frame(FramePutData, []byte("abcd"))...)},
		{"put cut", append(append([]byte{}, put...), frame(FramePutData, []byte("abc"))[:6]...)},
		{"request inside put", append(append([]byte{}, put...), put...)},
		{"cut header", []byte{byte(FrameRequest), 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := NewRequestDecoder(bytes.NewReader(tt.b))
			var err error
			for range 3 {
				if _, err = d.Next(); err != nil {
					break
				}
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
			if strings.Contains(err.Error(), "../f") {
				t.Fatalf("error quotes the stream: %v", err)
			}
		})
	}
}

func TestEventRoundTripAndBounds(t *testing.T) {
	var buf bytes.Buffer
	e := NewEventEncoder(&buf)
	_ = e.Event(Event{ID: "e", Kind: EventStarted})
	_ = e.Data(FrameStdout, "e", bytes.Repeat([]byte("o"), MaxChunk+1))
	_ = e.Event(Event{ID: "e", Kind: EventResult, Result: &ExecResult{ExitCode: 3}})
	_ = e.Event(Event{ID: "l", Kind: EventList, List: &ListBatch{Entries: []Entry{{Name: "a", Type: EntryFile}}, Done: true}})
	_ = e.Event(Event{ID: "x", Kind: EventError, Error: &Error{Code: ErrBusy, Message: "too many execs"}})
	d := NewEventDecoder(&buf)
	var kinds []string
	out := 0
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == FrameEvent {
			kinds = append(kinds, f.Event.Kind)
		} else {
			out += len(f.Data)
		}
	}
	if got, want := strings.Join(kinds, ","), "started,result,list,error"; got != want || out != MaxChunk+1 {
		t.Fatalf("kinds %s, %d output bytes; want %s, %d", got, out, want, MaxChunk+1)
	}
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"unknown error code", frame(FrameEvent, []byte(`{"id":"x","kind":"error","error":{"code":"x","message":"m"}}`))},
		{"result without body", frame(FrameEvent, []byte(`{"id":"x","kind":"result"}`))},
		{"list name with slash", frame(FrameEvent, []byte(`{"id":"x","kind":"list","list":{"entries":[{"name":"a/b","type":"file","size":0,"mode":0}]}}`))},
		{"data no id", frame(FrameStdout, []byte{0, 'a', 'b'})},
		{"data no data", frame(FrameStdout, []byte{1, 'a'})},
		{"oversized data frame", frame(FrameStdout, append([]byte{1, 'a'}, make([]byte, MaxChunk+1)...))},
		{"oversized file data frame", frame(FrameFileData, append([]byte{1, 'a'}, make([]byte, MaxFileChunk+1)...))},
		{"unknown type", frame(FrameRequest, []byte(`{}`))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewEventDecoder(bytes.NewReader(tt.b)).Next(); !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
		})
	}
}

// TestRequestDecoderRefusedRequestSkipped: a request that Validate refuses
// (a put with a path out of bounds) is that request's error, its data is
// skipped and the next request comes through.
func TestRequestDecoderRefusedRequestSkipped(t *testing.T) {
	var b []byte
	b = append(b, frame(FrameRequest, []byte(`{"id":"p","op":"put","file":{"path":"../f","size":3}}`))...)
	b = append(b, frame(FramePutData, []byte("abc"))...)
	b = append(b, frame(FrameRequest, []byte(`{"id":"g","op":"get","file":{"path":"f"}}`))...)
	d := NewRequestDecoder(bytes.NewReader(b))
	_, err := d.Next()
	var re *RequestError
	if !errors.As(err, &re) || re.ID != "p" || errors.Is(err, ErrProtocol) {
		t.Fatalf("first Next: %v, want a RequestError for p", err)
	}
	r, err := d.Next()
	if err != nil || r.ID != "g" {
		t.Fatalf("second Next: %+v, %v; want request g", r, err)
	}
}

// TestEventDecoderOutputBound: one exec's stdout over MaxOutputBytes is a
// protocol violation (the supervisor drops past the exec's bound).
func TestEventDecoderOutputBound(t *testing.T) {
	var buf bytes.Buffer
	e := NewEventEncoder(&buf)
	_ = e.Data(FrameStdout, "e", make([]byte, MaxOutputBytes+1))
	d := NewEventDecoder(&buf)
	for {
		_, err := d.Next()
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
			return
		}
	}
}

// FuzzRequestDecoder: whatever bytes arrive, the decoder never panics;
// every request it returns validates; a put's data is exactly its size;
// every refusal wraps ErrProtocol.
func FuzzRequestDecoder(f *testing.F) {
	var buf bytes.Buffer
	enc := NewRequestEncoder(&buf)
	_ = enc.Request(execReq("e1", Exec{Command: "echo hi", Env: map[string]string{"A": "b"}, Stdin: []byte("in"), Cwd: "src"}))
	_ = enc.Put(Request{ID: "p", Op: OpPut, File: &File{Path: "/tmp/f", Size: 5, Mode: 0o600}}, []byte("hello"))
	_ = enc.Request(Request{ID: "s", Op: OpSignal, Signal: &Signal{Target: "e1", Name: SignalKill}})
	_ = enc.Request(Request{ID: "l", Op: OpList, File: &File{Path: "."}})
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Add(frame(FrameRequest, []byte(`{"id":"a","op":"get","file":{"path":"x"}}`)))
	f.Add(frame(FrameRequest, []byte(`{"id":"p","op":"put","file":{"path":"f","size":3}}`)))
	f.Add([]byte{byte(FrameRequest), 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewRequestDecoder(bytes.NewReader(b))
		for {
			r, err := d.Next()
			if err == io.EOF {
				return
			}
			var re *RequestError
			if errors.As(err, &re) {
				if !ValidID(re.ID) || errors.Is(err, ErrProtocol) {
					t.Fatalf("request error with id %q: %v", re.ID, err)
				}
				continue
			}
			if err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("error %v does not wrap ErrProtocol", err)
				}
				return
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("returned an invalid request: %v", err)
			}
			if r.Op == OpPut {
				n, err := io.Copy(io.Discard, d.Data())
				if err == nil && n != r.File.Size {
					t.Fatalf("put data %d bytes, size %d", n, r.File.Size)
				}
				if err != nil && !errors.Is(err, ErrProtocol) {
					t.Fatalf("put data error %v does not wrap ErrProtocol", err)
				}
				if n > r.File.Size {
					t.Fatalf("put data %d bytes over its size %d", n, r.File.Size)
				}
			}
		}
	})
}

// TestFileDataFrames: file data goes in frames of MaxFileChunk (output in
// frames of MaxChunk), and a frame of exactly its bound is taken.
func TestFileDataFrames(t *testing.T) {
	var buf bytes.Buffer
	e := NewEventEncoder(&buf)
	if err := e.Data(FrameFileData, "g", make([]byte, 2*MaxFileChunk+1)); err != nil {
		t.Fatal(err)
	}
	if err := e.Data(FrameStdout, "x", make([]byte, MaxChunk+1)); err != nil {
		t.Fatal(err)
	}
	d := NewEventDecoder(&buf)
	var sizes []int
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(f.Data))
	}
	if want := []int{MaxFileChunk, MaxFileChunk, 1, MaxChunk, 1}; !slices.Equal(sizes, want) {
		t.Errorf("frames of %v bytes, want %v", sizes, want)
	}
}
