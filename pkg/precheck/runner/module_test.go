package runner

import (
	"errors"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
)

func TestCompileModuleKeepsLines(t *testing.T) {
	// The rewritten export keeps the line count, so a later error names the
	// script's own line.
	_, err := compileModule("export\n  default async () => {\n\n  return {\n}")
	var se *syntaxError
	if !errors.As(err, &se) || se.msg != "the script has a syntax error at line 5, column 2" {
		t.Fatalf("got %v", err)
	}
	if _, err := compileModule("export default async function check({ mcp }) { return { wake: false } }"); err != nil {
		t.Fatalf("named async function refused: %v", err)
	}
	if _, err := compileModule(strings.Repeat("// export default\n", maxCandidates+1) + "export default 1"); err == nil {
		t.Fatal("too many candidates accepted")
	}
}

func FuzzCompileModule(f *testing.F) {
	for _, s := range []string{
		"export default async () => ({ wake: false })",
		"const s = `export default ${1}`; export default () => s",
		"/* export default */ export default 1",
		"export default export default",
		"'export default'",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := compileModule(src)
		if (p == nil) == (err == nil) {
			t.Fatalf("program %v and error %v", p, err)
		}
		if err != nil {
			var se *syntaxError
			if !errors.As(err, &se) || !precheck.Printable(se.msg) || strings.Contains(se.msg, src) && len(src) > 8 {
				t.Fatalf("error %q is not a generic syntax error", err)
			}
		}
	})
}
