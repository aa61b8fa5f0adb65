package toolbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Source is one apt source: one URI, one suite and its components, with
// the options mmdebstrap must keep (the keyring, the architectures).
type Source struct {
	URI        string
	Suite      string
	Components []string
	SignedBy   string   // keyring path(s), space-separated; "" = apt's default keyrings
	Arch       []string // "" = every architecture
	File       string   // where it was read (for messages)
	off        bool     // Enabled: no
}

// Line is the one-line sources.list entry mmdebstrap takes as a MIRROR
// argument ("deb [opts] uri suite components").
func (s Source) Line() string {
	var opts []string
	if len(s.Arch) > 0 {
		opts = append(opts, "arch="+strings.Join(s.Arch, ","))
	}
	if s.SignedBy != "" {
		opts = append(opts, "signed-by="+strings.ReplaceAll(s.SignedBy, " ", ","))
	}
	b := "deb "
	if len(opts) > 0 {
		b += "[" + strings.Join(opts, " ") + "] "
	}
	b += s.URI + " " + s.Suite
	if len(s.Components) > 0 {
		b += " " + strings.Join(s.Components, " ")
	}
	return b
}

// ParseOneLine reads sources.list one-line entries ("deb [opt=v ...] uri
// suite comp..."); deb-src lines, comments and blank lines are skipped.
func ParseOneLine(file, data string) ([]Source, error) {
	var out []Source
	for i, line := range strings.Split(data, "\n") {
		if k := strings.IndexByte(line, '#'); k >= 0 {
			line = line[:k]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		where := fmt.Sprintf("%s:%d", file, i+1)
		typ, rest, _ := strings.Cut(line, " ")
		switch typ {
		case "deb-src":
			continue
		case "deb":
		default:
			return nil, fmt.Errorf("%s: type %q is neither deb nor deb-src", where, typ)
		}
		rest = strings.TrimSpace(rest)
		s := Source{File: file}
		if strings.HasPrefix(rest, "[") {
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, fmt.Errorf("%s: options without a closing ]", where)
			}
			for _, opt := range strings.Fields(rest[1:end]) {
				k, v, ok := strings.Cut(opt, "=")
				if !ok {
					return nil, fmt.Errorf("%s: option %q is not key=value", where, opt)
				}
				if err := s.setOption(strings.ToLower(k), strings.ReplaceAll(v, ",", " ")); err != nil {
					return nil, fmt.Errorf("%s: %v", where, err)
				}
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return nil, fmt.Errorf("%s: want \"deb uri suite [component...]\"", where)
		}
		s.URI, s.Suite, s.Components = f[0], f[1], f[2:]
		if s.disabled() {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// setOption keeps the options that change what apt fetches or trusts.
func (s *Source) setOption(key, value string) error {
	switch key {
	case "signed-by":
		if strings.Contains(value, "BEGIN PGP") {
			return errors.New("an inline Signed-By key cannot be passed on mmdebstrap's command line; put the key in a file and name it")
		}
		s.SignedBy = strings.Join(strings.Fields(value), " ")
	case "arch", "architectures":
		s.Arch = strings.Fields(value)
	case "enabled":
		if v := strings.ToLower(strings.TrimSpace(value)); v == "no" || v == "false" {
			s.off = true
		}
	}
	return nil
}

func (s Source) disabled() bool { return s.off }

// ParseDeb822 reads a .sources file: paragraphs of "Field: value" with
// continuation lines; each deb paragraph yields one Source per URI and
// suite. Paragraphs with Enabled: no and deb-src only are skipped.
func ParseDeb822(file, data string) ([]Source, error) {
	var out []Source
	fields := map[string]string{}
	last := ""
	start := 0
	flush := func() error {
		if len(fields) == 0 {
			return nil
		}
		defer func() { fields = map[string]string{}; last = "" }()
		where := fmt.Sprintf("%s:%d", file, start)
		types := strings.Fields(fields["types"])
		if len(types) == 0 {
			return fmt.Errorf("%s: paragraph without Types", where)
		}
		hasDeb := false
		for _, t := range types {
			switch t {
			case "deb":
				hasDeb = true
			case "deb-src":
			default:
				return fmt.Errorf("%s: type %q is neither deb nor deb-src", where, t)
			}
		}
		if v := strings.ToLower(strings.TrimSpace(fields["enabled"])); v == "no" || v == "false" {
			return nil
		}
		if !hasDeb {
			return nil
		}
		uris, suites := strings.Fields(fields["uris"]), strings.Fields(fields["suites"])
		if len(uris) == 0 || len(suites) == 0 {
			return fmt.Errorf("%s: a deb paragraph needs URIs and Suites", where)
		}
		base := Source{File: file, Components: strings.Fields(fields["components"])}
		if v, ok := fields["signed-by"]; ok {
			if err := base.setOption("signed-by", v); err != nil {
				return fmt.Errorf("%s: %v", where, err)
			}
		}
		if v, ok := fields["architectures"]; ok {
			base.setOption("arch", v)
		}
		for _, u := range uris {
			for _, su := range suites {
				s := base
				s.URI, s.Suite = u, su
				s.Components = append([]string(nil), base.Components...)
				out = append(out, s)
			}
		}
		return nil
	}
	for i, line := range strings.Split(data, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if last == "" {
				return nil, fmt.Errorf("%s:%d: continuation line without a field", file, i+1)
			}
			fields[last] += "\n" + strings.TrimSpace(line)
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: %q is not \"Field: value\"", file, i+1, line)
		}
		if len(fields) == 0 {
			start = i + 1
		}
		last = strings.ToLower(strings.TrimSpace(k))
		fields[last] = strings.TrimSpace(v)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// maxSourcesFile bounds each sources file read.
const maxSourcesFile = 1 << 20

// MachineSources reads the apt sources of the machine whose root is root
// ("/" for this one): etc/apt/sources.list, then etc/apt/sources.list.d's
// *.list and *.sources files in name order (apt's own order; other names,
// such as *.disabled, are ignored as apt ignores them).
func MachineSources(root string) ([]Source, error) {
	var out []Source
	read := func(p string, parse func(string, string) ([]Source, error)) error {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		var b strings.Builder
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), maxSourcesFile)
		for sc.Scan() {
			b.WriteString(sc.Text())
			b.WriteByte('\n')
			if b.Len() > maxSourcesFile {
				return fmt.Errorf("%s: over %d bytes", p, maxSourcesFile)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		srcs, err := parse(p, b.String())
		if err != nil {
			return err
		}
		out = append(out, srcs...)
		return nil
	}
	if err := read(filepath.Join(root, "etc/apt/sources.list"), ParseOneLine); err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "etc/apt/sources.list.d")
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		switch {
		case strings.HasSuffix(n, ".list"):
			err = read(p, ParseOneLine)
		case strings.HasSuffix(n, ".sources"):
			err = read(p, ParseDeb822)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SelectRelease keeps the sources of one Debian release: suite codename
// itself and codename-* (updates, security, backports). Other suites, a
// third-party repository's own ("nodistro") say, are skipped: the toolbox
// is the release's packages, and such a repository can replace one of them
// (NodeSource's nodejs conflicts with Debian's npm). It is an error when no
// source serves the codename itself.
func SelectRelease(srcs []Source, codename string) (kept, skipped []Source, err error) {
	base := false
	for _, s := range srcs {
		if s.Suite == codename || strings.HasPrefix(s.Suite, codename+"-") {
			kept = append(kept, s)
			base = base || s.Suite == codename
		} else {
			skipped = append(skipped, s)
		}
	}
	if !base {
		return nil, nil, fmt.Errorf("toolbox: the machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d) have no deb entry for suite %q; add one, or pass --mirror", codename)
	}
	return kept, skipped, nil
}

// Codename reads VERSION_CODENAME from an os-release file.
func Codename(osRelease string) (string, error) {
	data, err := os.ReadFile(osRelease)
	if err != nil {
		return "", fmt.Errorf("toolbox: the Debian release: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VERSION_CODENAME="); ok {
			v = strings.Trim(strings.TrimSpace(v), `"'`)
			if packageRe.MatchString(v) {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("toolbox: %s has no VERSION_CODENAME; pass --suite", osRelease)
}
