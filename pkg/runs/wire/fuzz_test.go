package wire

import (
	"bytes"
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
