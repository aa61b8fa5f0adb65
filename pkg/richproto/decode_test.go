package richproto

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

const testTurn = "0123456789abcdef0123456789abcdef"

// repeatReader is n bytes of b repeated.
type repeatReader struct {
	b   []byte
	n   int64
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.n > 0 {
		c := copy(p[n:min(len(p), n+int(min(r.n, int64(len(r.b)-r.off))))], r.b[r.off:])
		n += c
		r.n -= int64(c)
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}

// packet streams a packet of files files of size bytes each (base64 of a
// pattern; size a multiple of 3 KiB), its other fields after them, each
// after pad spaces, without holding it.
func packet(files, size, pad int) io.Reader {
	rs := []io.Reader{strings.NewReader(`{"files":[`)}
	chunk := make([]byte, 3<<10)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	enc := []byte(base64.StdEncoding.EncodeToString(chunk))
	for i := range files {
		if i > 0 {
			rs = append(rs, strings.NewReader(","))
		}
		rs = append(rs, strings.NewReader(fmt.Sprintf(`{"name":"f%d","data":"`, i)))
		rs = append(rs, &repeatReader{b: enc, n: int64(size / len(chunk) * len(enc))})
		rs = append(rs, strings.NewReader(`"}`))
	}
	rs = append(rs, strings.NewReader("]"))
	for _, kv := range []string{`"turnId":"` + testTurn + `"`, `"ok":true`, `"text":"t"`} {
		rs = append(rs, strings.NewReader(","), &repeatReader{b: []byte(" "), n: int64(pad)}, strings.NewReader(kv))
	}
	return io.MultiReader(append(rs, strings.NewReader("}"))...)
}

// TestDecodeResultMatchesDecodeStrict: what json.Marshal wrote comes back
// as DecodeStrict and Validate read it.
func TestDecodeResultMatchesDecodeStrict(t *testing.T) {
	for _, r := range []Result{
		{TurnID: testTurn, OK: true, Text: "done <&> \u2028 é 🐈"},
		{TurnID: testTurn, OK: false, Cause: CauseModel},
		{TurnID: testTurn, OK: true, Text: "f", Files: []File{{Name: "a b.png", Type: "image/png", Data: []byte{0x89, 'P', 0}}, {Name: "e", Data: []byte{}}, {Name: "n"}}},
	} {
		data, _ := json.Marshal(r)
		got, err := DecodeResult(strings.NewReader(string(data)))
		if err != nil {
			t.Fatalf("DecodeResult(%s): %v", data, err)
		}
		var want Result
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("DecodeResult(%s) = %+v, want %+v", data, *got, want)
		}
	}
	if got, err := DecodeResult(strings.NewReader(` {"files": null, "turnId": "` + testTurn + `", "ok": true} `)); err != nil || got.Files != nil {
		t.Errorf("null files, spaces: %+v, %v", got, err)
	}
}

func TestDecodeResultRefusals(t *testing.T) {
	checkRefusals(t, []refusal{
		{"empty", strings.NewReader(""), "cut short"},
		{"array", strings.NewReader(`[]`), "not a JSON object"},
		{"unknown field", strings.NewReader(`{"INJECTED":1}`), "unknown field"},
		{"unknown file field", strings.NewReader(`{"files":[{"name":"a","data":"","INJECTED":1}]}`), "a file that is not {name, type, data}"},
		{"key twice", strings.NewReader(`{"text":"a","text":"INJECTED"}`), "a key twice"},
		{"wrong type", strings.NewReader(`{"ok":"INJECTED"}`), "a field of the wrong type"},
		{"files not an array", strings.NewReader(`{"files":{"INJECTED":1}}`), "files is not an array"},
		{"data not base64", strings.NewReader(`{"files":[{"name":"a","data":"INJECTED!"}]}`), "a file that is not {name, type, data}"},
		{"trailing data", strings.NewReader(`{"turnId":"` + testTurn + `"} "INJECTED"`), "trailing data after the object"},
		{"cut in a value", strings.NewReader(`{"turnId":"` + testTurn + `","text":"INJEC`), "cut short"},
		{"cut between values", strings.NewReader(`{"turnId":"` + testTurn + `",`), "cut short"},
		{"cut in a file", strings.NewReader(`{"files":[{"name":"INJEC`), "cut short"},
		{"hostile name", strings.NewReader(`{"files":[{"name":"invoice\u202efdp.exe","data":""}]}`), "files[0].name must be a plain file name"},
		{"eleven files", strings.NewReader(`{"files":[` + strings.TrimSuffix(strings.Repeat(`{"name":"a","data":""},`, 11), ",") + `]}`), "at most 10 reply files"},
		{"text over its value bound", io.MultiReader(strings.NewReader(`{"text":"`), &repeatReader{b: []byte("x"), n: maxFieldJSON}, strings.NewReader(`"}`)), "a value over its bound"},
		{"spaces over a value bound", io.MultiReader(strings.NewReader(`{"text":"a",`), &repeatReader{b: []byte(" "), n: maxFieldJSON}, strings.NewReader(`"ok":true}`)), "a value over its bound"},
		{"invalid", strings.NewReader(`{"turnId":"INJECTED"}`), "turnId must be 32 hex characters"},
	})
}

// TestDecodeResultFileBounds: TestDecodeResultRefusals at a file's bounds,
// packets of 14 to 70 MB.
func TestDecodeResultFileBounds(t *testing.T) {
	if raceEnabled {
		// Decoding them under -race took about 20 s of make unit; nothing
		// here runs concurrently.
		t.Skip("decodes 14 to 70 MB packets: runs without -race in make unit's second pass")
	}
	ten := make([]byte, MaxReplyFileBytes)
	f10 := `{"name":"a","data":"` + base64.StdEncoding.EncodeToString(ten) + `"}`
	checkRefusals(t, []refusal{
		{"a file over 10 MiB", strings.NewReader(`{"files":[{"name":"a","data":"` + base64.StdEncoding.EncodeToString(append(ten, 0)) + `"}]}`), "files[0] is over"},
		{"files over 50 MiB", strings.NewReader(`{"files":[` + strings.Repeat(f10+",", 5) + `{"name":"a","data":"AA=="}]}`), "reply files total over"},
		{"a file value over its bound", io.MultiReader(strings.NewReader(`{"files":[{"name":"a","data":"`), &repeatReader{b: []byte("AAAA"), n: maxFileJSON}, strings.NewReader(`"}]}`)), "a value over its bound"},
	})
}

// refusal is a packet DecodeResult must refuse with an error naming want.
type refusal struct {
	name string
	in   io.Reader
	want string
}

func checkRefusals(t *testing.T, refusals []refusal) {
	t.Helper()
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeResult(tt.in)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "INJECTED") || strings.Contains(err.Error(), "\u202e") {
				t.Errorf("the error quotes the packet: %v", err)
			}
		})
	}
}

// TestDecodeResultPacketBound: a packet at the bound is read, one byte
// more is refused (a small bound here; DecodeResult's is MaxPacketBytes).
func TestDecodeResultPacketBound(t *testing.T) {
	p := `{"turnId":"` + testTurn + `","ok":true,   "text":"t"}`
	if _, err := decodeResult(strings.NewReader(p), int64(len(p))); err != nil {
		t.Errorf("a packet at the bound: %v", err)
	}
	for _, over := range []string{p + " ", strings.Replace(p, "   ", "    ", 1)} {
		if _, err := decodeResult(strings.NewReader(over), int64(len(p))); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("reply packet over %d bytes", len(p))) {
			t.Errorf("a packet one byte over the bound: %v", err)
		}
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestDecodeResultReadError(t *testing.T) {
	cut := errors.New("connection reset")
	_, err := DecodeResult(io.MultiReader(strings.NewReader(`{"text":"a`), failingReader{cut}))
	var re *ReadError
	if !errors.As(err, &re) || !errors.Is(err, cut) || errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want a ReadError of the connection's", err)
	}
}

// TestDecodeResultMemory: a packet of 50 MiB of files costs its files and
// one file's encoded value, not copies of the packet.
func TestDecodeResultMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("decodes a 70 MB packet: runs without -race in make unit's second pass")
	}
	size := MaxReplyFileBytes - MaxReplyFileBytes%(3<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := DecodeResult(packet(5, size, 0))
	runtime.ReadMemStats(&after)
	if err != nil || len(res.Files) != 5 || len(res.Files[4].Data) != size {
		t.Fatalf("DecodeResult: %v", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("decoding 5 files of %d bytes allocated %d MiB", size, alloc>>20)
	if limit := uint64(5*size + 3*maxFileJSON); alloc > limit {
		t.Errorf("decoding allocated %d MiB, want at most %d MiB (the files and a file's encoded value)", alloc>>20, limit>>20)
	}
}

// FuzzDecodeResult: whatever DecodeResult accepts is what encoding/json
// reads from the same bytes, and valid.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range []string{`{"turnId":"` + testTurn + `","ok":true,"text":"t","files":[{"name":"a","type":"x/y","data":"AA=="}]}`,
		`{"turnId":"` + testTurn + `","ok":false,"cause":"model"}`, `{"files":null}`, `{"text":"\u00e9"} `, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeResult(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		var want Result
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("accepted what encoding/json refuses: %v", err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("DecodeResult = %+v, encoding/json %+v", *got, want)
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("accepted an invalid packet: %v", err)
		}
	})
}
