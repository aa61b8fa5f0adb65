package toolbox

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseOneLine(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // Source.Line() of each
		err      string
	}{
		{"plain", "deb http://deb.debian.org/debian bookworm main contrib\n", []string{"deb http://deb.debian.org/debian bookworm main contrib"}, ""},
		{"comments, blanks, deb-src", "# a comment\n\ndeb-src http://x/debian bookworm main\ndeb http://x/debian bookworm main # trailing\n", []string{"deb http://x/debian bookworm main"}, ""},
		{"options kept", "deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/k.gpg] http://x/debian bookworm main\n",
			[]string{"deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/k.gpg] http://x/debian bookworm main"}, ""},
		{"other options dropped", "deb [trusted=yes check-valid-until=no] http://x/d bookworm-security main\n", []string{"deb http://x/d bookworm-security main"}, ""},
		{"disabled", "deb [enabled=no] http://x/d bookworm main\n", nil, ""},
		{"flat repository", "deb http://x/flat ./\n", []string{"deb http://x/flat ./"}, ""},
		{"unknown type", "rpm http://x/d bookworm main\n", nil, "neither deb nor deb-src"},
		{"open options", "deb [arch=amd64 http://x/d bookworm main\n", nil, "closing ]"},
		{"option without value", "deb [trusted] http://x/d bookworm main\n", nil, "not key=value"},
		{"no suite", "deb http://x/d\n", nil, "want \"deb uri suite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseOneLine("sources.list", tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "sources.list:") {
					t.Fatalf("got %v, want an error naming the file and containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lines := sourceLines(got); !reflect.DeepEqual(lines, tc.want) {
				t.Errorf("got %q, want %q", lines, tc.want)
			}
		})
	}
}

func sourceLines(srcs []Source) []string {
	var out []string
	for _, s := range srcs {
		out = append(out, s.Line())
	}
	return out
}

// This machine's /etc/apt/sources.list.d/debian.sources (Debian 12's own form).
const debianSources = `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`

func TestParseDeb822(t *testing.T) {
	const key = "/usr/share/keyrings/debian-archive-keyring.gpg"
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"debian 12", debianSources, []string{
			"deb [signed-by=" + key + "] http://deb.debian.org/debian bookworm main",
			"deb [signed-by=" + key + "] http://deb.debian.org/debian bookworm-updates main",
			"deb [signed-by=" + key + "] http://deb.debian.org/debian-security bookworm-security main",
		}, ""},
		{"several URIs and types", "Types: deb deb-src\nURIs: http://a/d http://b/d\nSuites: bookworm\nComponents: main contrib\nArchitectures: amd64\n",
			[]string{"deb [arch=amd64] http://a/d bookworm main contrib", "deb [arch=amd64] http://b/d bookworm main contrib"}, ""},
		{"case-insensitive fields, extra blank lines", "\n\ntypes: deb\nuris: http://a/d\nsuites: bookworm\ncomponents: main\n\n\n", []string{"deb http://a/d bookworm main"}, ""},
		{"deb-src only", "Types: deb-src\nURIs: http://a/d\nSuites: bookworm\nComponents: main\n", nil, ""},
		{"disabled", "Types: deb\nURIs: http://a/d\nSuites: bookworm\nComponents: main\nEnabled: no\n", nil, ""},
		{"no types", "URIs: http://a/d\nSuites: bookworm\n", nil, "without Types"},
		{"no suites", "Types: deb\nURIs: http://a/d\n", nil, "needs URIs and Suites"},
		{"not a field", "Types: deb\nthis is not a field\n", nil, "is not \"Field: value\""},
		{"continuation first", " indented\n", nil, "continuation line without a field"},
		{"inline key", "Types: deb\nURIs: http://a/d\nSuites: bookworm\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n", nil, "inline Signed-By"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDeb822("debian.sources", tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "debian.sources:") {
					t.Fatalf("got %v, want an error naming the file and containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lines := sourceLines(got); !reflect.DeepEqual(lines, tc.want) {
				t.Errorf("got %q, want %q", lines, tc.want)
			}
		})
	}
}

func FuzzParseSources(f *testing.F) {
	f.Add(debianSources)
	f.Add("deb [arch=amd64 signed-by=/k] http://x/d bookworm main\n")
	f.Fuzz(func(t *testing.T, in string) {
		for _, parse := range []func(string, string) ([]Source, error){ParseOneLine, ParseDeb822} {
			srcs, err := parse("f", in)
			if err != nil {
				continue
			}
			for _, s := range srcs {
				// What reaches mmdebstrap's command line is one line.
				if l := s.Line(); strings.ContainsAny(l, "\n\r") || !strings.HasPrefix(l, "deb ") {
					t.Fatalf("line %q from %q", l, in)
				}
			}
		}
	})
}

func TestMachineSourcesAndSelectRelease(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "etc/apt/sources.list.d")
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte("deb http://mirror.lan/debian bookworm main\n"), 0o644)
	os.WriteFile(filepath.Join(d, "debian.sources"), []byte(debianSources), 0o644)
	os.WriteFile(filepath.Join(d, "nodesource.sources"), []byte("Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n"), 0o644)
	os.WriteFile(filepath.Join(d, "google.list.disabled-by-farm"), []byte("deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"), 0o644)
	os.WriteFile(filepath.Join(d, "backports.list"), []byte("deb http://deb.debian.org/debian bookworm-backports main\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\n"), 0o644)

	srcs, err := MachineSources(root)
	if err != nil {
		t.Fatal(err)
	}
	// sources.list first, then sources.list.d in name order; *.disabled-by-farm ignored.
	wantSuites := []string{"bookworm", "bookworm-backports", "bookworm", "bookworm-updates", "bookworm-security", "nodistro"}
	var got []string
	for _, s := range srcs {
		got = append(got, s.Suite)
	}
	if !reflect.DeepEqual(got, wantSuites) {
		t.Fatalf("suites %q, want %q", got, wantSuites)
	}
	code, err := Codename(filepath.Join(root, "etc/os-release"))
	if err != nil || code != "bookworm" {
		t.Fatalf("codename %q, %v", code, err)
	}
	kept, skipped, err := SelectRelease(srcs, code)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 5 || len(skipped) != 1 || skipped[0].Suite != "nodistro" {
		t.Errorf("kept %q, skipped %q: want the five bookworm* sources kept and nodistro skipped", sourceLines(kept), sourceLines(skipped))
	}
	if _, _, err := SelectRelease(srcs, "trixie"); err == nil || !strings.Contains(err.Error(), `suite "trixie"`) {
		t.Errorf("no source for the release: got %v, want an error naming the suite", err)
	}
	// The plan takes the machine's sources as mirrors, always explicitly.
	p, err := NewPlan(BaseOptions{Packages: SmallPackages, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if p.Suite != "bookworm" || len(p.Mirrors) != 5 || p.Mirrors[0] != "deb http://mirror.lan/debian bookworm main" {
		t.Errorf("plan suite %q mirrors %q", p.Suite, p.Mirrors)
	}
}

func TestMachineSourcesErrors(t *testing.T) {
	root := t.TempDir()
	if srcs, err := MachineSources(root); err != nil || len(srcs) != 0 {
		t.Errorf("no apt directory: got %v, %v; want nothing, no error", srcs, err)
	}
	if _, err := NewPlan(BaseOptions{Packages: SmallPackages, Root: root, Suite: "bookworm"}); err == nil || !strings.Contains(err.Error(), "no deb entry") {
		t.Errorf("no sources: got %v, want a refusal", err)
	}
	if _, err := NewPlan(BaseOptions{Packages: SmallPackages, Root: root}); err == nil || !strings.Contains(err.Error(), "os-release") {
		t.Errorf("no os-release: got %v, want a refusal naming it", err)
	}
	d := filepath.Join(root, "etc/apt/sources.list.d")
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(d, "bad.sources"), []byte("Types: deb\nURIs: http://a/d\n"), 0o644)
	if _, err := MachineSources(root); err == nil || !strings.Contains(err.Error(), "bad.sources") {
		t.Errorf("a broken file: got %v, want an error naming it", err)
	}
}
