package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Inside pkg/host no file leans on one above it: docs/ARCHITECTURE.md lists
// the package's files bottom up (the line starting "pkg/host's files,
// bottom up:"), and a file may use only names declared in files before it
// in that list, so the files' own uses form no circle and a reader can
// read the package from the bottom.

// fileOrderRe finds the list in docs/ARCHITECTURE.md.
var fileOrderRe = regexp.MustCompile("(?s)pkg/host's files, bottom up: (.*?)\\.\n")

// fileUses parses the non-test files of dir and returns, per file, the
// other files whose declarations it uses (a package-level name, a method,
// a field), resolved by go/types. Imports are stood in for by empty
// packages: a use of another package resolves to nothing and is left out,
// so the check needs no build of the dependencies.
func fileUses(dir string) (map[string][]string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, _ := conf.Check("p", fset, files, info) // errors: the empty imports
	fileOf := func(pos token.Pos) string { return filepath.Base(fset.Position(pos).Filename) }
	out := map[string][]string{}
	used := map[string]map[string]bool{}
	for _, f := range files {
		n := fileOf(f.Pos())
		out[n], used[n] = nil, map[string]bool{}
	}
	add := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		from, to := fileOf(at), fileOf(obj.Pos())
		if from != to {
			used[from][to] = true
		}
	}
	for id, obj := range info.Uses {
		// Package-level names only: a local's declaration is in the file
		// that uses it.
		if obj.Parent() == pkg.Scope() {
			add(id.Pos(), obj)
		}
	}
	for sel, s := range info.Selections {
		add(sel.Sel.Pos(), s.Obj())
	}
	for n, us := range used {
		for u := range us {
			out[n] = append(out[n], u)
		}
		slices.Sort(out[n])
	}
	return out, nil
}

// emptyImporter stands in an empty package for every import.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	name := path[strings.LastIndexByte(path, '/')+1:]
	if i := strings.IndexByte(name, '.'); i > 0 {
		name = name[:i]
	}
	p := types.NewPackage(path, name)
	p.MarkComplete()
	return p, nil
}

// orderViolations checks uses against order (bottom up): a file of the
// package missing from the order, a listed file that does not exist, and a
// file using one listed after it.
func orderViolations(order []string, uses map[string][]string) []string {
	pos := map[string]int{}
	for i, n := range order {
		pos[n] = i
	}
	var out []string
	for n, us := range uses {
		pn, ok := pos[n]
		if !ok {
			out = append(out, fmt.Sprintf("%s is not in the list", n))
			continue
		}
		for _, u := range us {
			if pu, ok := pos[u]; ok && pu > pn {
				out = append(out, fmt.Sprintf("%s uses %s, which stands above it", n, u))
			}
		}
	}
	for _, n := range order {
		if _, ok := uses[n]; !ok {
			out = append(out, fmt.Sprintf("%s is listed but does not exist", n))
		}
	}
	slices.Sort(out)
	return out
}

func TestOrderViolationsCatchesBadOrders(t *testing.T) {
	uses := map[string][]string{"a.go": nil, "b.go": {"a.go"}, "c.go": {"a.go", "b.go"}}
	tests := []struct {
		name  string
		order []string
		want  []string
	}{
		{"bottom up", []string{"a.go", "b.go", "c.go"}, nil},
		{"leans up", []string{"b.go", "a.go", "c.go"}, []string{"b.go uses a.go, which stands above it"}},
		{"missing", []string{"a.go", "b.go"}, []string{"c.go is not in the list"}},
		{"stale", []string{"a.go", "b.go", "c.go", "d.go"}, []string{"d.go is listed but does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := orderViolations(tt.order, uses); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFileUsesReadsMethodsAndNames(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"a.go": "package p\n\ntype T struct{}\n\nconst K = 1\n",
		"b.go": "package p\n\nfunc (T) M() int { return K }\n",
		"c.go": "package p\n\nimport \"strings\"\n\nfunc f(t T) int { K := 2; return K }\n\nfunc g(t T) int { return t.M() }\n\nfunc h(b strings.Builder) int { return b.Len() }\n",
		"d.go": "package p\n\ntype U struct{}\n\nfunc (U) Len() int { return 0 }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := fileUses(dir)
	if err != nil {
		t.Fatal(err)
	}
	// c.go's b.Len() is strings.Builder's, not d.go's.
	want := map[string][]string{"a.go": nil, "b.go": {"a.go"}, "c.go": {"a.go", "b.go"}, "d.go": nil}
	for n, w := range want {
		if !slices.Equal(got[n], w) {
			t.Errorf("%s uses %q, want %q", n, got[n], w)
		}
	}
}

// TestHostFilesBottomUp holds pkg/host's files to the order documented in
// docs/ARCHITECTURE.md.
func TestHostFilesBottomUp(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := fileOrderRe.FindSubmatch(doc)
	if m == nil {
		t.Fatal(`docs/ARCHITECTURE.md has no line "pkg/host's files, bottom up: a.go, b.go, ...."`)
	}
	var order []string
	for _, n := range strings.Split(string(m[1]), ",") {
		order = append(order, strings.Trim(strings.TrimSpace(n), "`"))
	}
	uses, err := fileUses(filepath.Join("..", "..", "pkg", "host"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range orderViolations(order, uses) {
		t.Errorf("pkg/host file order (docs/ARCHITECTURE.md): %s", v)
	}
}
