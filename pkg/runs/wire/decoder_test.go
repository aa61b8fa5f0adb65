package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

var testLimits = Limits{MaxOutputBytes: 100, MaxArtifacts: 3, MaxArtifactBytes: 600 << 10, MaxArtifactTotalBytes: 700 << 10, Setup: 1}

// stream builds a byte stream from frames.
type stream struct{ b []byte }

func (s *stream) raw(t FrameType, payload []byte) *stream {
	s.b = AppendFrame(s.b, t, payload)
	return s
}

func (s *stream) out(t FrameType, phase byte, data string) *stream {
	return s.raw(t, append([]byte{phase}, data...))
}

func (s *stream) json(t FrameType, v any) *stream {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return s.raw(t, b)
}

func (s *stream) phase(phase string, i, code int) *stream {
	return s.json(FramePhase, PhaseEnd{Phase: phase, Index: i, ExitCode: code})
}

// ok1 is a well-formed stream up to (not including) its artifacts: one
// setup command that succeeded, main exited 3.
func ok1() *stream {
	return new(stream).out(FrameStdout, 's', "setting up").phase(PhaseSetup, 1, 0).
		out(FrameStdout, 'm', "hello").out(FrameStderr, 'm', "oops").phase(PhaseMain, 0, 3)
}

func decodeAll(b []byte, l Limits) ([]Frame, error) {
	d := NewDecoder(bytes.NewReader(b), l)
	var fs []Frame
	for {
		f, err := d.Next()
		if err == io.EOF {
			return fs, nil
		}
		if err != nil {
			return fs, err
		}
		fs = append(fs, f)
	}
}

func TestEncoderDecoderRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	e := NewEncoder(&buf)
	big := bytes.Repeat([]byte("0123456789abcdef"), (ArtifactChunk*2+100)/16) // three data frames
	steps := []error{
		e.Output(FrameStdout, PhaseSetup, []byte("apt says hi")),
		e.Output(FrameStderr, PhaseSetup, []byte("apt warns")),
		e.PhaseEnd(PhaseEnd{Phase: PhaseSetup, Index: 1, ExitCode: 0}),
		e.Output(FrameStdout, PhaseMain, bytes.Repeat([]byte("x"), MaxChunk+10)), // two frames
		e.PhaseEnd(PhaseEnd{Phase: PhaseMain, ExitCode: 0}),
		e.Artifact(ArtifactHeader{Path: "big.bin", Size: int64(len(big))}, big),
		e.Artifact(ArtifactHeader{Path: "empty"}, nil),
		e.Artifact(ArtifactHeader{Path: "link", Error: ArtifactNotRegular}, nil),
		e.Result(Result{ExitCode: 0, StdoutTruncated: true, StdoutDropped: 5}),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if err := e.Output(FrameStdout, PhaseMain, []byte("late")); !errors.Is(err, ErrEncoderClosed) {
		t.Fatalf("write after the result: %v, want ErrEncoderClosed", err)
	}
	l := Limits{MaxOutputBytes: MaxChunk + 21, MaxArtifacts: 3, MaxArtifactBytes: int64(len(big)), MaxArtifactTotalBytes: int64(len(big)), Setup: 1}
	fs, err := decodeAll(buf.Bytes(), l)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var art []byte
	for _, f := range fs {
		switch f.Type {
		case FrameStdout, FrameStderr:
			got = append(got, fmt.Sprintf("%v/%s/%d", f.Type, f.Phase, len(f.Data)))
		case FramePhase:
			got = append(got, fmt.Sprintf("phase/%s/%d/%d", f.PhaseEnd.Phase, f.PhaseEnd.Index, f.PhaseEnd.ExitCode))
		case FrameArtifact:
			got = append(got, fmt.Sprintf("artifact/%s/%d/%s", f.Artifact.Path, f.Artifact.Size, f.Artifact.Error))
		case FrameArtifactData:
			if f.Artifact.Path != "big.bin" {
				t.Errorf("data frame names artifact %q, want big.bin", f.Artifact.Path)
			}
			art = append(art, f.Data...)
			got = append(got, fmt.Sprintf("data/%d", len(f.Data)))
		case FrameResult:
			got = append(got, fmt.Sprintf("result/%d/%v/%d", f.Result.ExitCode, f.Result.StdoutTruncated, f.Result.StdoutDropped))
		}
	}
	want := []string{
		"stdout/setup/11", "stderr/setup/9", "phase/setup/1/0", fmt.Sprintf("stdout/main/%d", MaxChunk), "stdout/main/10",
		"phase/main/0/0", fmt.Sprintf("artifact/big.bin/%d/", len(big)), fmt.Sprintf("data/%d", ArtifactChunk),
		fmt.Sprintf("data/%d", ArtifactChunk), fmt.Sprintf("data/%d", len(big)-2*ArtifactChunk),
		"artifact/empty/0/", "artifact/link/0/not a regular file", "result/0/true/5",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !bytes.Equal(art, big) {
		t.Fatal("artifact data differs")
	}
}

// Concurrent writers never interleave inside a frame.
func TestEncoderConcurrentWriters(t *testing.T) {
	var buf bytes.Buffer
	e := NewEncoder(&buf)
	var wg sync.WaitGroup
	const n = 200
	for _, s := range []FrameType{FrameStdout, FrameStderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				if err := e.Output(s, PhaseMain, bytes.Repeat([]byte{byte(s)}, 1000)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := e.PhaseEnd(PhaseEnd{Phase: PhaseMain}); err != nil {
		t.Fatal(err)
	}
	if err := e.Result(Result{}); err != nil {
		t.Fatal(err)
	}
	fs, err := decodeAll(buf.Bytes(), Limits{MaxOutputBytes: n * 1000, MaxArtifactBytes: 1, MaxArtifactTotalBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	count := map[FrameType]int{}
	for _, f := range fs {
		if f.Type == FrameStdout || f.Type == FrameStderr {
			if !bytes.Equal(f.Data, bytes.Repeat([]byte{byte(f.Type)}, 1000)) {
				t.Fatalf("%v frame carries mixed data", f.Type)
			}
		}
		count[f.Type]++
	}
	if count[FrameStdout] != n || count[FrameStderr] != n {
		t.Fatalf("counts %v, want %d each", count, n)
	}
}

// errWriter fails every write.
type errWriter struct{ n int }

func (w *errWriter) Write(p []byte) (int, error) { w.n++; return 0, errors.New("broken pipe") }

func TestEncoderErrorIsSticky(t *testing.T) {
	w := &errWriter{}
	e := NewEncoder(w)
	if err := e.Output(FrameStdout, PhaseMain, []byte("a")); err == nil {
		t.Fatal("no error from a failing writer")
	}
	if err := e.PhaseEnd(PhaseEnd{Phase: PhaseMain}); err == nil || w.n != 1 {
		t.Fatalf("second write: err %v after %d writes, want the sticky error after 1", err, w.n)
	}
	if err := e.Output(FrameStdout, "other", []byte("a")); err == nil {
		t.Fatal("unknown phase accepted")
	}
	if err := e.Output(FrameResult, PhaseMain, []byte("a")); err == nil {
		t.Fatal("non-output stream accepted")
	}
	if err := e.Artifact(ArtifactHeader{Path: "a", Size: 2}, []byte("a")); err == nil {
		t.Fatal("artifact size mismatch accepted")
	}
}

func TestDecoderAcceptsValidStreams(t *testing.T) {
	data := bytes.Repeat([]byte("d"), ArtifactChunk+1)
	tests := []struct {
		name string
		s    *stream
		l    Limits
	}{
		{"main exit 3", ok1().json(FrameResult, Result{ExitCode: 3}), testLimits},
		{"setup failed", new(stream).phase(PhaseSetup, 1, 2).json(FrameResult, Result{ExitCode: 2, FailedSetup: 1}), testLimits},
		{"supervisor error", new(stream).json(FrameResult, Result{ExitCode: -1, Error: "invalid job"}), testLimits},
		{"output exactly at the bound", new(stream).phase(PhaseSetup, 1, 0).out(FrameStdout, 'm', strings.Repeat("a", 100)).
			out(FrameStderr, 'm', strings.Repeat("a", 100)).phase(PhaseMain, 0, 0).json(FrameResult, Result{}), testLimits},
		{"stdout cut at the bound", new(stream).phase(PhaseSetup, 1, 0).out(FrameStdout, 'm', strings.Repeat("a", 100)).
			phase(PhaseMain, 0, 0).json(FrameResult, Result{StdoutTruncated: true, StdoutDropped: 1 << 40}), testLimits},
		{"cut without a count (an older toolbox)", new(stream).phase(PhaseSetup, 1, 0).out(FrameStdout, 'm', strings.Repeat("a", 100)).
			phase(PhaseMain, 0, 0).json(FrameResult, Result{StdoutTruncated: true}), testLimits},
		{"stderr cut at the bound, supervisor error", new(stream).out(FrameStderr, 's', strings.Repeat("a", 100)).
			json(FrameResult, Result{ExitCode: -1, Error: "stopped by a signal", StderrTruncated: true, StderrDropped: 7}), testLimits},
		{"artifacts at the bounds", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: int64(len(data))}).
			raw(FrameArtifactData, data[:ArtifactChunk]).raw(FrameArtifactData, data[ArtifactChunk:]).
			json(FrameArtifact, ArtifactHeader{Path: "b/c", Size: 1}).raw(FrameArtifactData, []byte("x")).
			json(FrameArtifact, ArtifactHeader{Path: "d", Error: ArtifactMissing}).json(FrameResult, Result{ExitCode: 3}),
			Limits{MaxOutputBytes: 100, MaxArtifacts: 3, MaxArtifactBytes: int64(len(data)), MaxArtifactTotalBytes: int64(len(data)) + 1, Setup: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeAll(tt.s.b, tt.l); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDecoderRefusals(t *testing.T) {
	res := func(s *stream) *stream { return s.json(FrameResult, Result{ExitCode: 3}) }
	hdr := func(t FrameType, n uint32) []byte {
		return binary.BigEndian.AppendUint32([]byte{byte(t)}, n)
	}
	tests := []struct {
		name string
		b    []byte
		l    Limits
		want string
	}{
		{"empty stream", nil, testLimits, "ended before the result"},
		{"ends without result", ok1().b, testLimits, "ended before the result"},
		{"truncated header", ok1().b[:3], testLimits, "ended before the result"},
		{"truncated payload", ok1().b[:10], testLimits, "ended inside a stdout frame"},
		{"unknown type 0", hdr(0, 0), testLimits, "unknown frame type 0"},
		{"unknown type 7", hdr(7, 1), testLimits, "unknown frame type 7"},
		{"frame over MaxFrame", hdr(FrameArtifactData, MaxFrame+1), testLimits, "over 1048576"},
		{"output without data", new(stream).raw(FrameStdout, []byte{'s'}).b, testLimits, "want a phase byte"},
		{"output chunk over MaxChunk", new(stream).out(FrameStdout, 's', strings.Repeat("a", MaxChunk+1)).b, testLimits, "want a phase byte"},
		{"unknown phase byte", new(stream).out(FrameStdout, 'x', "a").b, testLimits, "unknown phase byte"},
		{"stdout over the bound", new(stream).out(FrameStdout, 's', strings.Repeat("a", 60)).phase(PhaseSetup, 1, 0).
			out(FrameStdout, 'm', strings.Repeat("a", 41)).b, testLimits, "stdout output over 100"},
		{"stderr over the bound", new(stream).out(FrameStderr, 's', strings.Repeat("a", 101)).b, testLimits, "stderr output over 100"},
		{"setup output without setup", new(stream).out(FrameStdout, 's', "a").b, Limits{MaxOutputBytes: 9, MaxArtifactBytes: 1, MaxArtifactTotalBytes: 1}, "no setup command running"},
		{"setup output after main output", new(stream).phase(PhaseSetup, 1, 0).out(FrameStdout, 'm', "a").out(FrameStdout, 's', "a").b, testLimits, "no setup command running"},
		{"main output before setup ended", new(stream).out(FrameStdout, 'm', "a").b, testLimits, "before every setup command succeeded"},
		{"main output after setup failed", new(stream).phase(PhaseSetup, 1, 1).out(FrameStdout, 'm', "a").b, testLimits, "before every setup command succeeded"},
		{"output after main ended", ok1().out(FrameStdout, 'm', "a").b, testLimits, "after the main phase ended"},
		{"setup phase skips", new(stream).phase(PhaseSetup, 2, 0).b, Limits{MaxOutputBytes: 1, MaxArtifactBytes: 1, MaxArtifactTotalBytes: 1, Setup: 2}, "out of sequence"},
		{"setup phase beyond the job", new(stream).phase(PhaseSetup, 1, 0).phase(PhaseSetup, 2, 0).b, testLimits, "out of sequence"},
		{"main phase before setup", new(stream).phase(PhaseMain, 0, 0).b, testLimits, "main phase end out of sequence"},
		{"main phase with index", new(stream).phase(PhaseSetup, 1, 0).phase(PhaseMain, 1, 0).b, testLimits, "main phase end out of sequence"},
		{"two main phases", ok1().phase(PhaseMain, 0, 0).b, testLimits, "after the last command ended"},
		{"phase after failed setup", new(stream).phase(PhaseSetup, 1, 1).phase(PhaseMain, 0, 0).b, testLimits, "after the last command ended"},
		{"unknown phase", new(stream).phase("build", 1, 0).b, testLimits, "unknown phase"},
		{"exit code 256", new(stream).phase(PhaseSetup, 1, 256).b, testLimits, "exit code 256"},
		{"exit code -1 in phase", new(stream).phase(PhaseSetup, 1, -1).b, testLimits, "exit code -1"},
		{"phase not JSON", new(stream).raw(FramePhase, []byte("phase")).b, testLimits, "phase frame"},
		{"phase JSON null", new(stream).raw(FramePhase, []byte("null")).b, testLimits, "not a JSON object"},
		{"phase unknown field", new(stream).raw(FramePhase, []byte(`{"phase":"setup","index":1,"exitCode":0,"x":1}`)).b, testLimits, "unknown field"},
		{"phase trailing JSON", new(stream).raw(FramePhase, []byte(`{"phase":"setup","index":1,"exitCode":0}{}`)).b, testLimits, "trailing data"},
		{"meta over its bound", new(stream).raw(FramePhase, make([]byte, MaxMetaBytes+1)).b, testLimits, "over 65536"},
		{"artifact before main ended", new(stream).phase(PhaseSetup, 1, 0).json(FrameArtifact, ArtifactHeader{Path: "a"}).b, testLimits, "artifact before the main phase ended"},
		{"too many artifacts", ok1().json(FrameArtifact, ArtifactHeader{Path: "a"}).json(FrameArtifact, ArtifactHeader{Path: "b"}).
			json(FrameArtifact, ArtifactHeader{Path: "c"}).json(FrameArtifact, ArtifactHeader{Path: "d"}).b, testLimits, "more than 3 artifacts"},
		{"absolute artifact path", ok1().json(FrameArtifact, ArtifactHeader{Path: "/etc/passwd"}).b, testLimits, "absolute path"},
		{"dotdot artifact path", ok1().json(FrameArtifact, ArtifactHeader{Path: "../x"}).b, testLimits, ". or .. component"},
		{"unknown artifact error", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Error: "\x1b[31mhi"}).b, testLimits, "unknown artifact error"},
		{"artifact error with size", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: 1, Error: ArtifactMissing}).b, testLimits, "an error and a size"},
		{"negative artifact size", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: -1}).b, testLimits, "outside 0.."},
		{"artifact over its bound", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: 600<<10 + 1}).b, testLimits, "outside 0.."},
		{"artifacts over the total", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: 400 << 10}).
			raw(FrameArtifactData, make([]byte, ArtifactChunk)).raw(FrameArtifactData, make([]byte, 400<<10-ArtifactChunk)).
			json(FrameArtifact, ArtifactHeader{Path: "b", Size: 300<<10 + 1}).b, testLimits, "over 716800 bytes together"},
		{"data without artifact", ok1().raw(FrameArtifactData, []byte("x")).b, testLimits, "without an artifact"},
		{"data beyond the size", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: 1}).raw(FrameArtifactData, []byte("xy")).b, testLimits, "want 1"},
		{"data short, result follows", res(ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: 2}).raw(FrameArtifactData, []byte("x"))).b, testLimits, "want 2"},
		{"data split unevenly", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: ArtifactChunk + 1}).raw(FrameArtifactData, []byte("x")).b, testLimits, "want 262144"},
		{"header before data complete", ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: 2}).json(FrameArtifact, ArtifactHeader{Path: "b"}).b, testLimits, "remaining bytes"},
		{"result before data complete", res(ok1().json(FrameArtifact, ArtifactHeader{Path: "a", Size: 2})).b, testLimits, "remaining bytes"},
		{"data after result", append(res(ok1()).b, 0), testLimits, "data after the result"},
		{"second result", res(res(ok1())).b, testLimits, "data after the result"},
		{"result exit code out of range", ok1().json(FrameResult, Result{ExitCode: 300}).b, testLimits, "out of -1..255"},
		{"result failedSetup beyond the job", ok1().json(FrameResult, Result{ExitCode: 3, FailedSetup: 2}).b, testLimits, "failedSetup 2"},
		{"result contradicts main", ok1().json(FrameResult, Result{ExitCode: 0}).b, testLimits, "without a main phase end"},
		{"result without main", new(stream).phase(PhaseSetup, 1, 0).json(FrameResult, Result{ExitCode: 0}).b, testLimits, "without a main phase end"},
		{"result contradicts setup", new(stream).phase(PhaseSetup, 1, 2).json(FrameResult, Result{ExitCode: 3, FailedSetup: 1}).b, testLimits, "the phase ends said setup 1 exit 2"},
		{"result error not ASCII", ok1().json(FrameResult, Result{ExitCode: -1, Error: "bad\nline"}).b, testLimits, "printable ASCII"},
		{"result error too long", ok1().json(FrameResult, Result{ExitCode: -1, Error: strings.Repeat("e", MaxErrorBytes+1)}).b, testLimits, "over 256"},
		{"result cut below the bound", ok1().json(FrameResult, Result{ExitCode: 3, StdoutTruncated: true, StdoutDropped: 1}).b, testLimits, "cut below its bound (15 of 100 bytes)"},
		{"result dropped without the flag", new(stream).phase(PhaseSetup, 1, 0).out(FrameStderr, 'm', strings.Repeat("a", 100)).phase(PhaseMain, 0, 0).
			json(FrameResult, Result{StderrDropped: 1}).b, testLimits, "flag and dropped bytes disagree"},
		{"result negative dropped", ok1().json(FrameResult, Result{ExitCode: 3, StdoutDropped: -1}).b, testLimits, "negative dropped bytes"},
		{"result JSON array", ok1().raw(FrameResult, []byte("[]")).b, testLimits, "not a JSON object"},
		{"total over the bound", ok1().b, Limits{MaxOutputBytes: 100, MaxArtifactBytes: 1, MaxArtifactTotalBytes: 1, Setup: 1, MaxTotalBytes: 20}, "stream over 20 bytes"},
		{"invalid limits", ok1().b, Limits{}, "invalid decoder limits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(bytes.NewReader(tt.b), tt.l)
			var err error
			for err == nil {
				_, err = d.Next()
			}
			if err == io.EOF || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
			if tt.name != "invalid limits" && !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
			if _, again := d.Next(); again != err {
				t.Fatalf("second Next = %v, want the sticky %v", again, err)
			}
		})
	}
}

// The default total bound admits the worst legitimate stream: every output
// byte in its own frame, both streams at their bound, artifacts at theirs.
func TestDecoderDefaultTotalAdmitsOneByteFrames(t *testing.T) {
	l := Limits{MaxOutputBytes: 1000, MaxArtifacts: 1, MaxArtifactBytes: 10, MaxArtifactTotalBytes: 10}
	s := new(stream)
	for i := 0; i < 1000; i++ {
		s.out(FrameStdout, 'm', "a").out(FrameStderr, 'm', "b")
	}
	s.phase(PhaseMain, 0, 0).json(FrameArtifact, ArtifactHeader{Path: "a", Size: 10}).raw(FrameArtifactData, make([]byte, 10)).json(FrameResult, Result{})
	if _, err := decodeAll(s.b, l); err != nil {
		t.Fatal(err)
	}
}

// A reader error other than EOF is returned as it is, not as ErrProtocol.
func TestDecoderPassesReadErrors(t *testing.T) {
	boom := errors.New("connection reset")
	d := NewDecoder(io.MultiReader(bytes.NewReader(ok1().b), &failReader{boom}), testLimits)
	var err error
	for err == nil {
		_, err = d.Next()
	}
	if err != boom {
		t.Fatalf("err = %v, want %v", err, boom)
	}
}

type failReader struct{ err error }

func (f *failReader) Read([]byte) (int, error) { return 0, f.err }
