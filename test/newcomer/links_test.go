package newcomer

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// README is the front door and the manuals live under docs/: every
// relative link between them, and every #anchor, must lead somewhere, so
// that moving a section cannot strand a reference to it.

var (
	// linkRe is an inline link or image: [text](target) or ![alt](target).
	linkRe    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRe = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)
	idRe      = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	codeRe    = regexp.MustCompile("`[^`\n]*`")
	mdLinkRe  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// withoutCode drops fenced code blocks (a shell line is no link) and
// keeps the line count.
func withoutCode(doc string) string {
	lines := strings.Split(doc, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// slug is GitHub's anchor for a heading: the text without markup, lower
// case, punctuation but '-' and '_' dropped, each space a '-'.
func slug(heading string) string {
	heading = mdLinkRe.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are a document's targets: its headings' slugs (a repeated one
// gets -1, -2, ...) and explicit <a id> anchors.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, m := range headingRe.FindAllStringSubmatch(withoutCode(doc), -1) {
		s := slug(m[1])
		for n, base := 1, s; out[s]; n++ {
			s = fmt.Sprintf("%s-%d", base, n)
		}
		out[s] = true
	}
	for _, m := range idRe.FindAllStringSubmatch(doc, -1) {
		out[m[1]] = true
	}
	return out
}

// linkProblems checks every relative link of docs (repository-relative
// path -> text): the target exists (a document of docs, or a path exists
// says is there) and, for a markdown target, its #anchor is one of its
// headings. Each problem is "file:line: target: why".
func linkProblems(docs map[string]string, exists func(string) bool) []string {
	var out []string
	for name, doc := range docs {
		text := withoutCode(doc)
		for i, line := range strings.Split(text, "\n") {
			line = codeRe.ReplaceAllString(line, "``")
			for _, m := range linkRe.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := name
				if file != "" {
					dest = path.Clean(path.Join(path.Dir(name), file))
				}
				where := fmt.Sprintf("%s:%d: %s", name, i+1, target)
				d, isDoc := docs[dest]
				if !isDoc && !exists(dest) {
					out = append(out, where+": no such file")
					continue
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !isDoc {
					out = append(out, where+": anchor into a document the check does not read")
					continue
				}
				if !anchors(d)[anchor] {
					out = append(out, where+": no heading or <a id> with this anchor")
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// readDocs reads README.md, docs/*.md and bench/README.md.
func readDocs(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, n := range append(names, filepath.Join(root(t), "README.md"), filepath.Join(root(t), "bench", "README.md")) {
		rel, err := filepath.Rel(root(t), n)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.ToSlash(rel)] = read(t, rel)
	}
	return docs
}

func TestDocLinksResolve(t *testing.T) {
	r := root(t)
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(r, filepath.FromSlash(p)))
		return err == nil
	}
	docs := readDocs(t)
	if len(docs) < 10 {
		t.Fatalf("read %d documents, want README.md and the manuals under docs/", len(docs))
	}
	for _, p := range linkProblems(docs, exists) {
		t.Error(p)
	}
}

// The check catches a broken link: a missing file, a missing anchor in
// another document and in its own, and it leaves code alone.
func TestDocLinkCheckCatchesBreakage(t *testing.T) {
	none := func(string) bool { return false }
	base := map[string]string{
		"docs/a.md": "# A\n\n## The warm path\n\n- <a id=\"pinned\"></a>**Pinned**\n",
	}
	tests := []struct {
		name, readme string
		want         []string
	}{
		{"good", "# R\n[a](docs/a.md) [w](docs/a.md#the-warm-path) [p](docs/a.md#pinned) [me](#r) [web](https://x.test/#y)\n", nil},
		{"code is no link", "# R\n```\n[x](nowhere.md)\n```\n`[y](nowhere.md)`\n", nil},
		{"missing file", "# R\n[b](docs/b.md)\n", []string{"README.md:2: docs/b.md: no such file"}},
		{"missing anchor", "# R\n[w](docs/a.md#warm-path)\n", []string{"README.md:2: docs/a.md#warm-path: no heading or <a id> with this anchor"}},
		{"missing own anchor", "# R\n\n[q](#quick-start)\n", []string{"README.md:3: #quick-start: no heading or <a id> with this anchor"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs := map[string]string{"README.md": tt.readme}
			for k, v := range base {
				docs[k] = v
			}
			if got := linkProblems(docs, none); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSlug(t *testing.T) {
	for _, tt := range []struct{ heading, want string }{
		{"Code runs (`sandbox_run`)", "code-runs-sandbox_run"},
		{"Box <-> box: the fleet (`pkg/fleet`, fleet mode only)", "box---box-the-fleet-pkgfleet-fleet-mode-only"},
		{"1b. Code runs (`sandbox_run`): `echo ready`", "1b-code-runs-sandbox_run-echo-ready"},
		{"Design: one engine, one fence", "design-one-engine-one-fence"},
	} {
		if got := slug(tt.heading); got != tt.want {
			t.Errorf("slug(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}
