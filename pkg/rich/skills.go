package rich

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// Skills: an operator directory mounted read-only in the rich container
// (SkillsPath), one directory per skill holding SKILL.md and its other
// files. The worker offers a read_skill tool whose description indexes the
// skills; reads are confined to the tree: every path component is opened
// with openat and O_NOFOLLOW from the tree's descriptor (no link, no "..",
// no absolute path), only regular files of at most MaxSkillFileBytes are
// read, and at most MaxSkillChars characters are returned.
const (
	SkillsPath        = richproto.SkillsPath
	SkillTool         = "read_skill"
	SkillFile         = "SKILL.md"
	MaxSkillFileBytes = 256 << 10
	MaxSkillChars     = 40_000
	maxSkills         = 64
	maxSkillPathBytes = 512
	maxSkillDepth     = 8
	maxSkillIndex     = 3_500 // characters of the index in the tool's description
	maxSkillDescChars = 200
)

var skillComponentRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// skills is the worker's open skills tree (nil when none is mounted).
type skills struct {
	fd    int
	index string
}

// openSkills opens dir (the tree's root, not followed if a link); a
// missing directory means no skills.
func openSkills(dir string) (*skills, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open skills: %w", err)
	}
	s := &skills{fd: fd}
	s.index = s.buildIndex()
	return s, nil
}

func (s *skills) close() {
	if s != nil && s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// buildIndex lists the skills (directories holding SKILL.md) with the
// description line of each SKILL.md's front matter, bounded.
func (s *skills) buildIndex() string {
	fd, err := unix.Openat(s.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), SkillsPath)
	names, _ := f.Readdirnames(1024)
	f.Close()
	slices.Sort(names)
	var b strings.Builder
	n := 0
	for _, name := range names {
		if n >= maxSkills || !skillComponentRe.MatchString(name) {
			continue
		}
		text, err := s.read(name + "/" + SkillFile)
		if err != nil {
			continue
		}
		line := fmt.Sprintf("\n- %s: %s", name, skillDescription(text))
		if utf8.RuneCountInString(b.String())+utf8.RuneCountInString(line) > maxSkillIndex {
			break
		}
		b.WriteString(line)
		n++
	}
	return b.String()
}

// skillDescription is the "description:" line of a front matter, cut.
func skillDescription(text string) string {
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return "(no description)"
	}
	for line := range strings.SplitSeq(rest, "\n") {
		if line == "---" {
			break
		}
		if d, ok := strings.CutPrefix(line, "description:"); ok {
			d = strings.Map(func(r rune) rune {
				if r < 0x20 || r == 0x7f {
					return ' '
				}
				return r
			}, strings.TrimSpace(d))
			d, _ = truncateChars(d, maxSkillDescChars)
			return d
		}
	}
	return "(no description)"
}

// errSkillRefused wraps what read refuses (shown to the model).
func skillRefused(format string, a ...any) error { return refusedf(format, a...) }

// read returns the text of the file at rel within the tree.
func (s *skills) read(rel string) (string, error) {
	if len(rel) > maxSkillPathBytes {
		return "", skillRefused("the path is over %d bytes", maxSkillPathBytes)
	}
	parts := strings.Split(rel, "/")
	if len(parts) > maxSkillDepth {
		return "", skillRefused("the path has over %d parts", maxSkillDepth)
	}
	for _, p := range parts {
		if !skillComponentRe.MatchString(p) || strings.Contains(p, "..") {
			return "", skillRefused("the path must be relative, made of names of letters, digits, '.', '_' and '-', none starting with '.'")
		}
	}
	dir := s.fd
	for i, p := range parts {
		last := i == len(parts)-1
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if last {
			flags |= unix.O_NONBLOCK | unix.O_NOCTTY
		} else {
			flags |= unix.O_DIRECTORY
		}
		fd, err := unix.Openat(dir, p, flags, 0)
		if dir != s.fd {
			unix.Close(dir)
		}
		if err != nil {
			return "", skillRefused("no such skill file")
		}
		dir = fd
	}
	f := os.NewFile(uintptr(dir), "skill")
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", skillRefused("no such skill file")
	}
	if st.Size > MaxSkillFileBytes {
		return "", skillRefused("the file is over %d bytes", MaxSkillFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("read skill: %w", err)
	}
	if len(data) > MaxSkillFileBytes {
		return "", skillRefused("the file is over %d bytes", MaxSkillFileBytes)
	}
	if !utf8.Valid(data) {
		return "", skillRefused("the file is not UTF-8 text")
	}
	text, _ := truncateChars(string(data), MaxSkillChars)
	return text, nil
}

// skillSpec is read_skill's declaration with the index of the skills.
func (s *skills) spec() protocol.ToolSpec {
	return protocol.ToolSpec{
		Name: SkillTool,
		Description: fmt.Sprintf("Read a file of an operator skill: path is <skill>/%s for its instructions, or another file the skill names (relative, inside the skill). Text only, at most %d characters returned. Skills:%s",
			SkillFile, MaxSkillChars, s.index),
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`),
	}
}

func (s *skills) tool(_ context.Context, input json.RawMessage) (string, error) {
	var in struct {
		Path string `json:"path"`
	}
	if protocol.DecodeStrict(input, &in) != nil {
		return "", refusedf("arguments must be an object with path")
	}
	return s.read(in.Path)
}
