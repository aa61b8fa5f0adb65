package arch

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// docRowRe matches a row of the package table in docs/ARCHITECTURE.md:
// "| <layer> | `pkg/<name>` | ...".
var docRowRe = regexp.MustCompile("(?m)^\\| ([0-9]+) \\| `pkg/([a-z0-9_/]+)` \\|")

// tableMismatches compares the documented (package, layer) rows with the
// layers; each difference is one message.
func tableMismatches(layers [][]string, doc string) []string {
	want := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			want[p] = i
		}
	}
	got := map[string]int{}
	var out []string
	for _, m := range docRowRe.FindAllStringSubmatch(doc, -1) {
		n, _ := strconv.Atoi(m[1])
		if _, dup := got[m[2]]; dup {
			out = append(out, fmt.Sprintf("pkg/%s has two rows", m[2]))
		}
		got[m[2]] = n
	}
	for p, l := range want {
		switch g, ok := got[p]; {
		case !ok:
			out = append(out, fmt.Sprintf("pkg/%s (layer %d) has no row", p, l))
		case g != l:
			out = append(out, fmt.Sprintf("pkg/%s is documented in layer %d, the test puts it in layer %d", p, g, l))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("pkg/%s has a row but no layer", p))
		}
	}
	slices.Sort(out)
	return out
}

func TestTableMismatchesCatchesDrift(t *testing.T) {
	ls := [][]string{{"a"}, {"b"}}
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"match", "| 0 | `pkg/a` | x |\n| 1 | `pkg/b` | y |\n", nil},
		{"missing row", "| 0 | `pkg/a` | x |\n", []string{"pkg/b (layer 1) has no row"}},
		{"wrong layer", "| 0 | `pkg/a` | x |\n| 0 | `pkg/b` | y |\n", []string{"pkg/b is documented in layer 0, the test puts it in layer 1"}},
		{"extra row", "| 0 | `pkg/a` | x |\n| 1 | `pkg/b` | y |\n| 1 | `pkg/c` | z |\n", []string{"pkg/c has a row but no layer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tableMismatches(ls, tt.doc); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestArchitectureTableMatchesLayers keeps the package table of
// docs/ARCHITECTURE.md in step with the layer list above.
func TestArchitectureTableMatchesLayers(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range tableMismatches(layers, string(doc)) {
		t.Errorf("docs/ARCHITECTURE.md package table: %s", m)
	}
}
