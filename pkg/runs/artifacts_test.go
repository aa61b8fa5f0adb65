package runs

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCheckArtifacts(t *testing.T) {
	req := []string{"a.txt", "dir/b.bin", "c"}
	tests := []struct {
		name     string
		got      []Artifact
		maxEach  int64
		maxTotal int64
		want     []Artifact
		wantErr  string
	}{
		{name: "all back, reordered to request order",
			got: []Artifact{
				{Path: "c", Size: 0, Data: nil},
				{Path: "a.txt", Size: 3, Data: []byte("abc")},
				{Path: "dir/b.bin", Size: 2, Data: []byte{0, 1}},
			},
			maxEach: 3, maxTotal: 5,
			want: []Artifact{
				{Path: "a.txt", Size: 3, Data: []byte("abc")},
				{Path: "dir/b.bin", Size: 2, Data: []byte{0, 1}},
				{Path: "c", Size: 0},
			}},
		{name: "missing and supervisor errors",
			got:     []Artifact{{Path: "dir/b.bin", Size: 9 << 20, Error: "over the size bound"}},
			maxEach: 10, maxTotal: 10,
			want: []Artifact{
				{Path: "a.txt", Error: "missing"},
				{Path: "dir/b.bin", Size: 9 << 20, Error: "over the size bound"},
				{Path: "c", Error: "missing"},
			}},
		{name: "nothing back", maxEach: 1, maxTotal: 1,
			want: []Artifact{{Path: "a.txt", Error: "missing"}, {Path: "dir/b.bin", Error: "missing"}, {Path: "c", Error: "missing"}}},

		// A lying supervisor.
		{name: "not requested", got: []Artifact{{Path: "/etc/shadow", Size: 1, Data: []byte("x")}}, maxEach: 10, maxTotal: 10,
			wantErr: "was not requested"},
		{name: "unclean form of a requested path", got: []Artifact{{Path: "./a.txt", Size: 1, Data: []byte("x")}}, maxEach: 10, maxTotal: 10,
			wantErr: "was not requested"},
		{name: "duplicate", got: []Artifact{{Path: "c", Size: 1, Data: []byte("x")}, {Path: "c", Error: "missing"}}, maxEach: 10, maxTotal: 10,
			wantErr: "artifacts[2] twice"},
		{name: "size smaller than data", got: []Artifact{{Path: "a.txt", Size: 1, Data: []byte("xyz")}}, maxEach: 10, maxTotal: 10,
			wantErr: "size 1 with 3 bytes"},
		{name: "size larger than data", got: []Artifact{{Path: "a.txt", Size: 5, Data: []byte("xyz")}}, maxEach: 10, maxTotal: 10,
			wantErr: "size 5 with 3 bytes"},
		{name: "negative size", got: []Artifact{{Path: "a.txt", Size: -1, Error: "missing"}}, maxEach: 10, maxTotal: 10,
			wantErr: "negative size"},
		{name: "data with error", got: []Artifact{{Path: "a.txt", Size: 1, Data: []byte("x"), Error: "not a regular file"}}, maxEach: 10, maxTotal: 10,
			wantErr: "data with an error"},
		{name: "over each", got: []Artifact{{Path: "a.txt", Size: 4, Data: []byte("wxyz")}}, maxEach: 3, maxTotal: 10,
			wantErr: "over the bound of 3 bytes"},
		{name: "over total", got: []Artifact{{Path: "a.txt", Size: 3, Data: []byte("xyz")}, {Path: "c", Size: 3, Data: []byte("xyz")}}, maxEach: 3, maxTotal: 5,
			wantErr: "over the total bound of 5 bytes"},
		{name: "error with control characters", got: []Artifact{{Path: "a.txt", Error: "x\x1b[2J"}}, maxEach: 3, maxTotal: 5,
			wantErr: "unreadable error"},
		{name: "huge error", got: []Artifact{{Path: "a.txt", Error: strings.Repeat("e", MaxArtifactErrorBytes+1)}}, maxEach: 3, maxTotal: 5,
			wantErr: "unreadable error"},
		{name: "more than requested", got: []Artifact{{Path: "a.txt", Error: "missing"}, {Path: "dir/b.bin", Error: "missing"}, {Path: "c", Error: "missing"}, {Path: "d", Error: "missing"}},
			maxEach: 3, maxTotal: 5, wantErr: "was not requested"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckArtifacts(req, tc.got, tc.maxEach, tc.maxTotal)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("CheckArtifacts = %v, %v; want ErrInvalid containing %q", got, err, tc.wantErr)
				}
				if got != nil {
					t.Errorf("refused answer returned artifacts %v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("CheckArtifacts = %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("CheckArtifacts = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzCheckArtifacts feeds a supervisor's answer built from fuzz input: each
// line "path|size|error|data". Whatever it says, an accepted answer keeps
// every guarantee CheckArtifacts documents.
func FuzzCheckArtifacts(f *testing.F) {
	f.Add("a.txt|3||abc\nc|0|missing|")
	f.Add("a.txt|1||abc")
	f.Add("c|0||\nc|0||")
	f.Add("/etc/shadow|1||x")
	f.Add("dir/b.bin|2|not a regular file|xy")
	req := []string{"a.txt", "dir/b.bin", "c"}
	const maxEach, maxTotal = 4, 6
	f.Fuzz(func(t *testing.T, answer string) {
		var got []Artifact
		for _, line := range strings.Split(answer, "\n") {
			fields := strings.SplitN(line, "|", 4)
			if len(fields) != 4 {
				continue
			}
			var size int64
			for _, c := range fields[1] {
				size = size*10 + int64(c%10)
				if size > 1<<40 {
					break
				}
			}
			if strings.HasPrefix(fields[1], "-") {
				size = -size
			}
			a := Artifact{Path: fields[0], Size: size, Error: fields[2]}
			if fields[3] != "" {
				a.Data = []byte(fields[3])
			}
			got = append(got, a)
		}
		out, err := CheckArtifacts(req, got, maxEach, maxTotal)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || out != nil {
				t.Fatalf("refusal %v (artifacts %v) must wrap ErrInvalid and return none", err, out)
			}
			return
		}
		if len(out) != len(req) {
			t.Fatalf("got %d artifacts, want one per request (%d)", len(out), len(req))
		}
		var total int64
		for i, a := range out {
			if a.Path != req[i] {
				t.Fatalf("artifact %d is %q, want %q", i, a.Path, req[i])
			}
			if a.Error != "" {
				if len(a.Data) != 0 {
					t.Fatalf("artifact %q has an error and data", a.Path)
				}
				continue
			}
			if a.Size != int64(len(a.Data)) || a.Size > maxEach {
				t.Fatalf("artifact %q: size %d, %d bytes, bound %d", a.Path, a.Size, len(a.Data), maxEach)
			}
			total += a.Size
		}
		if total > maxTotal {
			t.Fatalf("accepted %d bytes, bound %d", total, maxTotal)
		}
	})
}
