package coderun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// The text writer, fed any split of any bytes, writes what encoding/json
// writes for the whole after strings.ToValidUTF8.
func TestTextWriterMatchesEncodingJSON(t *testing.T) {
	samples := [][]byte{
		[]byte("plain"),
		[]byte("<tag> & \"quotes\" \\ \n\t\r\b\f \x00\x01\x1f \u2028\u2029 é € 𝄞"),
		[]byte("bad \xff\xfe run, split \xe2\x82\xac and cut \xe2\x82"),
		[]byte("\xe2\x82\xac\xe2\x82\xac\xf0\x9d\x84\x9e\xc3"),
		[]byte("\uFFFD literal then \xff invalid \uFFFD\xff"),
		{0xf0, 0x9d, 0x84},
		{},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		b := make([]byte, rng.IntN(64))
		alphabet := []byte("a\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\xff\x80\"<\n")
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		samples = append(samples, b)
	}
	for _, raw := range samples {
		want, _ := json.Marshal(strings.ToValidUTF8(string(raw), "\uFFFD"))
		for range 20 {
			var out bytes.Buffer
			out.WriteByte('"')
			tw := textWriter{w: &out}
			rest := raw
			for len(rest) > 0 {
				k := rng.IntN(len(rest)) + 1
				tw.write(rest[:k], false)
				rest = rest[k:]
			}
			tw.write(nil, true)
			out.WriteByte('"')
			if out.String() != string(want) {
				t.Fatalf("%q in pieces: %s, want %s", raw, out.Bytes(), want)
			}
		}
	}
}

// statusRuns are runs in every shape a status answer takes.
func statusRuns(t *testing.T) map[string]*Run {
	g, _ := newTestRegistry(t, RegistryLimits{MaxOutputBytes: 3*jsonChunk + 7})
	out := map[string]*Run{}
	out["queued"] = mustCreate(t, g, runs.Params{Command: "x", Project: "p<&>"})
	out["awaiting approval"] = mustCreate(t, g, network)
	running := mustCreate(t, g, shell)
	running.Start()
	big := bytes.Repeat([]byte("€\xffa<\u2028"), jsonChunk) // runes and invalid bytes across chunk edges
	running.Output(runs.StreamStdout, runs.PhaseMain, big[:2*jsonChunk+1])
	running.Output(runs.StreamStderr, runs.PhaseMain, []byte("warn \x00\n"))
	out["running"] = running
	done := mustCreate(t, g, runs.Params{Command: "x", Artifacts: []string{"e", "one", "two", "three", "big", "gone"}})
	done.Start()
	done.Output(runs.StreamStdout, runs.PhaseMain, big) // cut at the bound
	code := 3
	arts := []runs.Artifact{{Path: "e", Size: 0}, {Path: "one", Size: 1, Data: []byte{0xff}}, {Path: "two", Size: 2, Data: []byte("ab")},
		{Path: "three", Size: 3, Data: []byte("abc")}, {Path: "big", Size: 3*jsonChunk + 2, Data: bytes.Repeat([]byte{1, 2, 250}, jsonChunk+1)[:3*jsonChunk+2]},
		{Path: "gone", Error: runs.ArtifactMissing}}
	done.Finish(Finish{Result: runs.ResultFailed, ExitCode: &code, Artifacts: arts, Error: "x \"y\"", Cut: Cut{Stdout: true, StdoutDropped: 5}})
	out["finished"] = done
	empty := mustCreate(t, g, shell)
	empty.Start()
	empty.Finish(Finish{Result: runs.ResultOK})
	out["finished empty"] = empty
	return out
}

// WriteStatusJSON is json.Marshal(Status()) in another order: the same
// document for every shape of run.
func TestWriteStatusJSONIsTheStatus(t *testing.T) {
	for name, r := range statusRuns(t) {
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			if err := r.WriteStatusJSON(&got); err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(r.Status())
			var g, w map[string]any
			if err := json.Unmarshal(got.Bytes(), &g); err != nil {
				t.Fatalf("not JSON: %v: %.200s", err, got.Bytes())
			}
			json.Unmarshal(want, &w)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("streamed document differs:\n got %.300s\nwant %.300s", got.Bytes(), want)
			}
			if got.Len() != len(want) {
				t.Errorf("streamed %d bytes, json.Marshal %d: an escape differs", got.Len(), len(want))
			}
		})
	}
}

// A result event written by WriteEventJSON is the event with the whole run,
// one line; other events are as json.Encoder writes them.
func TestWriteEventJSON(t *testing.T) {
	r := statusRuns(t)["finished"]
	full := r.Status()
	var lines []string
	err := r.Subscribe(context.Background(), func(ev runs.Event) error {
		var got, want bytes.Buffer
		if err := r.WriteEventJSON(&got, ev); err != nil {
			return err
		}
		if ev.Type == runs.EventResult {
			if ev.Status.Stdout != "" || ev.Status.Artifacts[1].Data != nil {
				t.Errorf("Subscribe's result event carries data: the run's bytes would be shared")
			}
			ev.Status = &full
		}
		json.NewEncoder(&want).Encode(ev)
		var g, w map[string]any
		json.Unmarshal(got.Bytes(), &g)
		json.Unmarshal(want.Bytes(), &w)
		if !reflect.DeepEqual(g, w) || !strings.HasSuffix(got.String(), "}\n") || strings.Count(got.String(), "\n") != 1 {
			t.Errorf("event %d: %.200q, want %.200q", ev.Seq, got.String(), want.String())
		}
		lines = append(lines, ev.Type)
		return nil
	})
	if err != nil || lines[len(lines)-1] != runs.EventResult {
		t.Fatalf("events %v, err %v", lines, err)
	}
}

// blockingWriter hands each Write to the test, which lets it through.
type blockingWriter struct {
	wrote chan int
	next  chan struct{}
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.wrote <- len(p)
	<-b.next
	return len(p), nil
}

// A run is not forgotten while an answer is being written from it, even
// past its hold and over the bounds (issue 33: the oldest runs were pruned
// under their own clients, whose streams ended mid-result): the answer
// completes; the next prune after it forgets the run and releases its
// bytes at once. A client that stops reading holds it only until the
// handler's write deadline.
func TestRunBeingReadIsKeptUntilTheAnswerEnds(t *testing.T) {
	g, c := newTestRegistry(t, RegistryLimits{MaxRetained: 1})
	r := mustCreate(t, g, runs.Params{Command: "x", Artifacts: []string{"a"}})
	r.Start()
	r.Output(runs.StreamStdout, runs.PhaseMain, bytes.Repeat([]byte("o"), 3*jsonChunk))
	r.Finish(Finish{Result: runs.ResultOK, Artifacts: []runs.Artifact{{Path: "a", Size: 1 << 20, Data: make([]byte, 1<<20)}}})
	bw := &blockingWriter{wrote: make(chan int), next: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- r.WriteStatusJSON(bw) }()
	<-bw.wrote // the head: the answer is under way and its client stopped reading
	c.Advance(DefaultHold + time.Second)
	newer := mustCreate(t, g, shell)
	newer.Start()
	newer.Finish(Finish{Result: runs.ResultOK})
	g.Prune() // MaxRetained 1 and r past its hold, but being read: it stays
	if _, err := g.Get(r.ID()); err != nil {
		t.Errorf("a run being read was forgotten: %v", err)
	}
	close(bw.next) // the client reads again
	go func() {
		for range bw.wrote {
		}
	}()
	if err := <-done; err != nil {
		t.Errorf("answer of a run being read: %v, want it whole", err)
	}
	g.Prune() // the answer ended: r goes
	if _, err := g.Get(r.ID()); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("Get after the answer ended: %v, want ErrNotFound", err)
	}
	r.mu.Lock()
	left := len(r.out[0]) + len(r.st.Artifacts[0].Data) + len(r.hist)
	r.mu.Unlock()
	if left != 0 {
		t.Errorf("a pruned run still holds %d bytes and events", left)
	}
	if err := r.Subscribe(context.Background(), func(runs.Event) error { return nil }); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("Subscribe to a pruned run: %v, want ErrNotFound", err)
	}
	close(bw.wrote)
}

// TestRetainForgetsARunUnderAReader: past Retain a run goes even while an
// answer is being written from it (a client reading slowly enough to meet
// each write deadline must not hold the room of new runs for good); the
// answer ends with ErrNotFound at its next chunk.
func TestRetainForgetsARunUnderAReader(t *testing.T) {
	g, c := newTestRegistry(t, RegistryLimits{Retain: 10 * time.Minute})
	r := mustCreate(t, g, runs.Params{Command: "x", Artifacts: []string{"a"}})
	r.Start()
	r.Output(runs.StreamStdout, runs.PhaseMain, bytes.Repeat([]byte("o"), 3*jsonChunk))
	r.Finish(Finish{Result: runs.ResultOK})
	bw := &blockingWriter{wrote: make(chan int), next: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- r.WriteStatusJSON(bw) }()
	<-bw.wrote
	c.Advance(10*time.Minute + time.Second)
	g.Prune()
	if _, err := g.Get(r.ID()); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("Get past Retain under a reader: %v, want ErrNotFound", err)
	}
	close(bw.next)
	go func() {
		for range bw.wrote {
		}
	}()
	if err := <-done; !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("answer of a run forgotten past Retain: %v, want ErrNotFound", err)
	}
	close(bw.wrote)
}
