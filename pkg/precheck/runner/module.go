package runner

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/file"
	"github.com/dop251/goja/parser"
)

// The seed's script is an ES module with one default export and no
// imports. goja compiles scripts, not modules, so the module form is
// accepted by one careful transform: the `export default` that starts a
// top-level statement becomes an assignment to a binding the runner reads.
// Each textual candidate is tried alone and kept only when the parsed
// program has, at exactly that offset, a top-level statement assigning to
// the binding: an `export default` inside a string, a template or a
// comment is never rewritten, and a second real one (or any import or
// other export) stays a syntax error. The replacement keeps every line
// break, so errors point at the script's own lines.

// defaultBinding receives the default export (the runner defines it before
// the script runs; the program is compiled in strict mode, as a module is).
const defaultBinding = "__precheck__"

// maxCandidates bounds the parses of one script.
const maxCandidates = 8

var exportDefaultRe = regexp.MustCompile(`\bexport\s+default\b`)

// errNoExport: the script has no top-level default export.
var errNoExport = errors.New("the script has no `export default`; write it as `export default async ({ mcp, firedAt, timeZone, today, schedule }) => result`")

// scriptName is the file name in engine messages and stack traces.
const scriptName = "precheck.js"

// compileModule turns a module-form script into a strict program that
// assigns its default export to defaultBinding. Errors are syntaxErrors.
func compileModule(src string) (*goja.Program, error) {
	locs := exportDefaultRe.FindAllStringIndex(src, maxCandidates+1)
	if len(locs) > maxCandidates {
		return nil, &syntaxError{msg: fmt.Sprintf("the script mentions `export default` more than %d times", maxCandidates)}
	}
	var firstErr error
	for _, loc := range locs {
		candidate := src[:loc[0]] + replacement(src[loc[0]:loc[1]]) + src[loc[1]:]
		prog, err := parser.ParseFile(nil, scriptName, candidate, 0)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if !assignsDefaultAt(prog, loc[0]) {
			continue
		}
		p, err := goja.CompileAST(prog, true)
		if err != nil {
			return nil, fromCompileError(err)
		}
		return p, nil
	}
	if firstErr != nil {
		return nil, fromParseError(firstErr)
	}
	// No candidate was a top-level export: report the script's own syntax
	// error if it has one, else the missing export.
	if _, err := parser.ParseFile(nil, scriptName, src, 0); err != nil {
		return nil, fromParseError(err)
	}
	return nil, &syntaxError{msg: errNoExport.Error()}
}

// replacement is an assignment to defaultBinding as long as the original
// text when it can be, keeping the original's line breaks.
func replacement(orig string) string {
	r := defaultBinding + " ="
	if n := strings.Count(orig, "\n"); n > 0 {
		r += strings.Repeat("\n", n)
	}
	return r
}

// assignsDefaultAt reports whether prog has a top-level `defaultBinding =
// ...` statement starting at offset (0-based) of the source.
func assignsDefaultAt(prog *ast.Program, offset int) bool {
	for _, st := range prog.Body {
		es, ok := st.(*ast.ExpressionStatement)
		if !ok {
			continue
		}
		as, ok := es.Expression.(*ast.AssignExpression)
		if !ok {
			continue
		}
		id, ok := as.Left.(*ast.Identifier)
		if ok && id.Name.String() == defaultBinding && id.Idx == file.Idx(offset+1) {
			return true
		}
	}
	return false
}

// syntaxError is a script that does not compile; msg is generic (a
// position, never the script's text).
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

func fromParseError(err error) error {
	var list parser.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		p := list[0].Position
		return &syntaxError{msg: fmt.Sprintf("the script has a syntax error at line %d, column %d", p.Line, p.Column)}
	}
	return &syntaxError{msg: "the script has a syntax error"}
}

func fromCompileError(err error) error {
	var se *goja.CompilerSyntaxError
	if errors.As(err, &se) && se.File != nil {
		p := se.File.Position(se.Offset)
		return &syntaxError{msg: fmt.Sprintf("the script has a syntax error at line %d, column %d", p.Line, p.Column)}
	}
	var re *goja.CompilerReferenceError
	if errors.As(err, &re) && re.File != nil {
		p := re.File.Position(re.Offset)
		return &syntaxError{msg: fmt.Sprintf("the script has an invalid reference at line %d, column %d", p.Line, p.Column)}
	}
	return &syntaxError{msg: "the script does not compile"}
}
