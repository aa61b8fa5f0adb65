package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Kinds register themselves (DESIGN.md section 16): each kind package
// exports a Registration (var Registration = kind.Registration{...}), and
// pkg/host names the kinds in one file only, its table of registrations,
// which lists every kind's Registration. Adding a kind is its package and
// a line in that table.

// registryFile is the host's one table of kinds.
const registryFile = "registry.go"

// hostKindExempt are host files allowed to name a kind, and why: none
// since the API wire types moved to pkg/apiwire (issue 34).
var hostKindExempt = map[string]string{}

// kindRuleViolations checks, under pkgRoot (a module's pkg/ directory),
// that each of kinds exports a Registration, that no non-test file of
// pkgRoot/host but table (and the exempt ones) imports a kind, and that
// table names every kind's Registration.
func kindRuleViolations(pkgRoot, module string, kinds []string, table string, exempt map[string]string) ([]string, error) {
	var out []string
	for _, k := range kinds {
		ok, err := exportsRegistration(filepath.Join(pkgRoot, k))
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, fmt.Sprintf("pkg/%s exports no Registration (var Registration = kind.Registration{...}): a kind registers itself", k))
		}
	}
	isKind := map[string]bool{}
	for _, k := range kinds {
		isKind[module+"/pkg/"+k] = true
	}
	hostDir := filepath.Join(pkgRoot, "host")
	files, err := goFiles(hostDir)
	if err != nil {
		return nil, err
	}
	registered := map[string]bool{}
	fset := token.NewFileSet()
	for _, n := range files {
		f, err := parser.ParseFile(fset, filepath.Join(hostDir, n), nil, 0)
		if err != nil {
			return nil, err
		}
		names := map[string]string{} // local name -> kind
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !isKind[path] {
				continue
			}
			k := strings.TrimPrefix(path, module+"/pkg/")
			if n != table && exempt[n] == "" {
				out = append(out, fmt.Sprintf("pkg/host/%s names the kind pkg/%s: only the host's table (%s) may", n, k, table))
			}
			local := filepath.Base(path)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			names[local] = k
		}
		if n != table {
			continue
		}
		ast.Inspect(f, func(x ast.Node) bool {
			if sel, ok := x.(*ast.SelectorExpr); ok && sel.Sel.Name == "Registration" {
				if id, ok := sel.X.(*ast.Ident); ok && names[id.Name] != "" {
					registered[names[id.Name]] = true
				}
			}
			return true
		})
	}
	for _, k := range kinds {
		if !registered[k] {
			out = append(out, fmt.Sprintf("pkg/%s is not in the host's table (pkg/host/%s lists no %s.Registration)", k, table, filepath.Base(k)))
		}
	}
	slices.Sort(out)
	return out, nil
}

// goFiles are the non-test .go files of dir, sorted.
func goFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			out = append(out, n)
		}
	}
	return out, nil
}

// exportsRegistration reports whether a non-test file of dir declares a
// package-level var Registration of type kind.Registration (by its type or
// its composite literal).
func exportsRegistration(dir string) (bool, error) {
	files, err := goFiles(dir)
	if err != nil {
		return false, err
	}
	isReg := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "Registration" && fmt.Sprint(sel.X) == "kind"
	}
	fset := token.NewFileSet()
	for _, n := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			return false, err
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				for i, name := range v.Names {
					if name.Name != "Registration" {
						continue
					}
					if v.Type != nil && isReg(v.Type) {
						return true, nil
					}
					if i < len(v.Values) {
						if cl, ok := v.Values[i].(*ast.CompositeLit); ok && isReg(cl.Type) {
							return true, nil
						}
					}
				}
			}
		}
	}
	return false, nil
}

// TestKindsRegister: every kind exports its Registration, the host's
// table lists each, and no other host file names a kind.
func TestKindsRegister(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	module := modulePath(t, filepath.Join(root, "go.mod"))
	got, err := kindRuleViolations(filepath.Join(root, "pkg"), module, kinds, registryFile, hostKindExempt)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		t.Error(v)
	}
}

// TestKindRulesCatchPlants: planted violations in a fixture module are
// each reported: a kind without a Registration, a kind missing from the
// table, a host file naming a kind (under an alias too); a clean fixture
// reports none.
func TestKindRulesCatchPlants(t *testing.T) {
	const module = "example.com/m"
	write := func(t *testing.T, root, rel, src string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kindSrc := func(name string) string {
		return "package " + name + "\n\nimport \"" + module + "/pkg/kind\"\n\nvar Registration = kind.Registration{Name: \"" + name + "\"}\n"
	}
	table := "package host\n\nimport (\n\t\"" + module + "/pkg/alpha\"\n\t\"" + module + "/pkg/beta\"\n\t\"" + module + "/pkg/kind\"\n)\n\nvar registry = []kind.Registration{alpha.Registration, beta.Registration}\n"
	tests := []struct {
		name  string
		plant func(t *testing.T, root string)
		want  []string
	}{
		{"clean", func(*testing.T, string) {}, nil},
		{"no registration", func(t *testing.T, root string) {
			write(t, root, "beta/beta.go", "package beta\n\nfunc New() {}\n")
		}, []string{"pkg/beta exports no Registration (var Registration = kind.Registration{...}): a kind registers itself"}},
		{"host names a kind", func(t *testing.T, root string) {
			write(t, root, "host/turn.go", "package host\n\nimport sealed \""+module+"/pkg/alpha\"\n\nvar _ = sealed.Registration\n")
		}, []string{"pkg/host/turn.go names the kind pkg/alpha: only the host's table (registry.go) may"}},
		{"not in the table", func(t *testing.T, root string) {
			write(t, root, "host/registry.go", "package host\n\nimport (\n\t\""+module+"/pkg/alpha\"\n\t\""+module+"/pkg/kind\"\n)\n\nvar registry = []kind.Registration{alpha.Registration}\n")
		}, []string{"pkg/beta is not in the host's table (pkg/host/registry.go lists no beta.Registration)"}},
		{"exempt file", func(t *testing.T, root string) {
			write(t, root, "host/wire.go", "package host\n\nimport \""+module+"/pkg/beta\"\n\nvar _ = beta.Registration\n")
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "alpha/alpha.go", kindSrc("alpha"))
			write(t, root, "beta/beta.go", kindSrc("beta"))
			write(t, root, "host/registry.go", table)
			write(t, root, "host/host.go", "package host\n")
			tt.plant(t, root)
			got, err := kindRuleViolations(root, module, []string{"alpha", "beta"}, registryFile, map[string]string{"wire.go": "wire types"})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}
