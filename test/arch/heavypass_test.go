package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// secondPass is what a test says when it skips under -race because it only
// moves tens of MiB: make unit runs it again without -race (Makefile,
// HEAVY_TESTS in HEAVY_PKGS).
const secondPass = "make unit's second pass"

// TestHeavyPassNamesEverySkippedTest: every test that skips under -race
// for make unit's second pass is named in HEAVY_TESTS and its package in
// HEAVY_PKGS, and those name nothing else; a test left out would run in no
// stage at all.
func TestHeavyPassNamesEverySkippedTest(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var tests, pkgs []string
	for _, line := range strings.Split(string(mk), "\n") {
		if v, ok := strings.CutPrefix(line, "HEAVY_TESTS := "); ok {
			tests = strings.Split(strings.TrimSpace(v), "|")
		}
		if v, ok := strings.CutPrefix(line, "HEAVY_PKGS := "); ok {
			pkgs = strings.Fields(v)
		}
	}
	if len(tests) == 0 || len(pkgs) == 0 {
		t.Fatal("the Makefile has no HEAVY_TESTS := or HEAVY_PKGS := line")
	}
	root := filepath.Join("..", "..")
	found := map[string]string{} // test name: its package as the Makefile names it
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(src), secondPass) {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(lit.Value, secondPass) {
					found[fn.Name.Name] = "./" + filepath.ToSlash(rel) + "/"
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatalf("no test says %q: has the phrase changed?", secondPass)
	}
	for name, pkg := range found {
		if !slices.Contains(tests, name) {
			t.Errorf("%s (%s) skips under -race for %s, but HEAVY_TESTS does not name it", name, pkg, secondPass)
		}
		if !slices.Contains(pkgs, pkg) {
			t.Errorf("%s skips under -race for %s, but HEAVY_PKGS does not name its package %s", name, secondPass, pkg)
		}
	}
	for _, name := range tests {
		if _, ok := found[name]; !ok {
			t.Errorf("HEAVY_TESTS names %s, which no test skipping for %s is called", name, secondPass)
		}
	}
	for _, pkg := range pkgs {
		has := false
		for _, p := range found {
			has = has || p == pkg
		}
		if !has {
			t.Errorf("HEAVY_PKGS names %s, where no test skips for %s", pkg, secondPass)
		}
	}
}
