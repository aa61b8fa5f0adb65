package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzDecoder: whatever bytes arrive, the Decoder never panics, and what it
// returns before an error keeps every limit: output per stream, artifact
// count, each artifact's data exactly its size within the bounds, at most
// one result and nothing after it; every refusal wraps ErrProtocol.
func FuzzDecoder(f *testing.F) {
	l := Limits{MaxOutputBytes: 64, MaxArtifacts: 2, MaxArtifactBytes: 40, MaxArtifactTotalBytes: 50, Setup: 2}
	f.Add(ok1().json(FrameResult, Result{ExitCode: 3}).b)
	f.Add(new(stream).phase(PhaseSetup, 1, 0).phase(PhaseSetup, 2, 7).json(FrameResult, Result{ExitCode: 7, FailedSetup: 2}).b)
	f.Add(new(stream).phase(PhaseSetup, 1, 0).phase(PhaseSetup, 2, 0).out(FrameStderr, 'm', "x").phase(PhaseMain, 0, 0).
		json(FrameArtifact, ArtifactHeader{Path: "a/b", Size: 3}).raw(FrameArtifactData, []byte("abc")).
		json(FrameArtifact, ArtifactHeader{Path: "c", Error: ArtifactMissing}).json(FrameResult, Result{}).b)
	f.Add([]byte{})
	f.Add(AppendFrame(nil, FrameStdout, []byte("s")))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(bytes.NewReader(b), l)
		var out [2]int
		var arts int
		var total int64
		var remaining int64
		results := 0
		for {
			fr, err := d.Next()
			if err == io.EOF {
				if results != 1 {
					t.Fatalf("EOF after %d results", results)
				}
				return
			}
			if err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("error %v does not wrap ErrProtocol", err)
				}
				return
			}
			if results > 0 {
				t.Fatalf("frame %v after the result", fr.Type)
			}
			switch fr.Type {
			case FrameStdout:
				out[0] += len(fr.Data)
			case FrameStderr:
				out[1] += len(fr.Data)
			case FrameArtifact:
				if remaining != 0 {
					t.Fatal("header while data was due")
				}
				arts++
				total += fr.Artifact.Size
				remaining = fr.Artifact.Size
				if fr.Artifact.Size > l.MaxArtifactBytes || ValidArtifactPath(fr.Artifact.Path) != nil {
					t.Fatalf("artifact %+v accepted", fr.Artifact)
				}
			case FrameArtifactData:
				remaining -= int64(len(fr.Data))
				if remaining < 0 {
					t.Fatal("more data than the header's size")
				}
			case FrameResult:
				if remaining != 0 {
					t.Fatal("result while data was due")
				}
				results++
			}
			if out[0] > l.MaxOutputBytes || out[1] > l.MaxOutputBytes || arts > l.MaxArtifacts || total > l.MaxArtifactTotalBytes {
				t.Fatalf("limits exceeded: out %v, artifacts %d, total %d", out, arts, total)
			}
		}
	})
}

// FuzzReadJob: whatever arrives on stdin, ReadJob never panics, never
// returns a job Validate refuses, and what it returns writes back to a line
// that reads as the same job.
func FuzzReadJob(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteJob(&buf, validJob()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"argv":["ls","-l"],"uid":1,"gid":1,"maxOutputBytes":1,"maxArtifactBytes":1,"maxArtifactTotalBytes":1,"artifacts":["a/b"]}`))
	f.Add([]byte(`{"command":"x","uid":1,"gid":1,"maxOutputBytes":1,"maxArtifactBytes":1,"maxArtifactTotalBytes":1,"artifacts":["../a"]}`))
	f.Add([]byte("{}\n{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := ReadJob(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("error %v is not ErrInvalidJob", err)
			}
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("ReadJob returned a job Validate refuses: %v", err)
		}
		var out bytes.Buffer
		if err := WriteJob(&out, j); err != nil {
			t.Fatalf("WriteJob of a read job: %v", err)
		}
		j2, err := ReadJob(&out)
		if err != nil {
			t.Fatalf("re-reading: %v", err)
		}
		// Compared as encoded (an empty list and none encode alike).
		b1, _ := json.Marshal(j)
		b2, _ := json.Marshal(j2)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("round trip changed the job:\n%s\n%s", b1, b2)
		}
	})
}
