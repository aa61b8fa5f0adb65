package runs

import (
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of an artifact path.
const (
	MaxArtifactPathBytes      = 1024 // the whole path
	MaxArtifactComponentBytes = 255  // one component (NAME_MAX)
	// MaxArtifactErrorBytes bounds Artifact.Error as the supervisor reports it.
	MaxArtifactErrorBytes = 256
)

// ArtifactMissing is Artifact.Error of a requested file that did not come back.
const ArtifactMissing = "missing"

// CleanArtifactPath checks one requested artifact, a path relative to
// /output, and returns its clean form (path.Clean, no leading "./"). It
// refuses, wrapping ErrInvalid: the empty path, absolute paths (also
// "/output/x": artifacts are written relative to /output), any ".."
// component (so "../workspace/x" and "../tmp/x" cannot reach /workspace or
// /tmp), backslashes, NUL and other control characters, invalid UTF-8, a
// trailing slash (a directory is not an artifact), paths that name /output
// itself ("." or "./"), components over 255 bytes and paths over 1024 bytes.
// A relative "workspace/x" is /output/workspace/x and is accepted.
func CleanArtifactPath(s string) (string, error) {
	switch {
	case s == "":
		return "", Invalidf("artifact path must not be empty")
	case len(s) > MaxArtifactPathBytes:
		return "", Invalidf("artifact path must be at most %d bytes, got %d", MaxArtifactPathBytes, len(s))
	case !utf8.ValidString(s):
		return "", Invalidf("artifact path must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return "", Invalidf("artifact path must not contain NUL bytes")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "", Invalidf("artifact path must not contain control characters")
	case strings.IndexByte(s, '\\') >= 0:
		return "", Invalidf("artifact path must not contain backslashes (use /)")
	case s[0] == '/':
		return "", Invalidf(`artifact path must be relative to /output ("report.json" for /output/report.json), not absolute`)
	}
	for _, c := range strings.Split(s, "/") {
		if c == ".." {
			return "", Invalidf("artifact path must not contain .. (only files under /output are exported; /workspace and /tmp are not)")
		}
		if len(c) > MaxArtifactComponentBytes {
			return "", Invalidf("artifact path components must be at most %d bytes", MaxArtifactComponentBytes)
		}
	}
	clean := path.Clean(s)
	if clean == "." {
		return "", Invalidf("artifact path must name a file under /output, not /output itself")
	}
	if strings.HasSuffix(s, "/") || strings.HasSuffix(s, "/.") {
		return "", Invalidf("artifact path must name a file, not a directory (no trailing /)")
	}
	return clean, nil
}

// CheckArtifacts checks what the in-container supervisor returned (hostile
// input) against the requested paths (clean forms, as Validate leaves
// them) and returns one Artifact per requested path, in request order; a
// requested path that did not come back gets Error ArtifactMissing. It
// refuses, wrapping ErrInvalid, the whole answer when: a path was not
// requested, a path came back twice, Size is negative, Size differs from
// len(Data) for an artifact without Error, an artifact with Error carries
// Data, an Error is over MaxArtifactErrorBytes or not printable UTF-8, one
// artifact is over maxEach or all together are over maxTotal bytes.
// The returned artifacts share Data with got.
func CheckArtifacts(requested []string, got []Artifact, maxEach, maxTotal int64) ([]Artifact, error) {
	index := make(map[string]int, len(requested))
	for i, r := range requested {
		index[r] = i
	}
	out := make([]Artifact, len(requested))
	seen := make([]bool, len(requested))
	var total int64
	for k, a := range got {
		i, ok := index[a.Path]
		if !ok {
			return nil, Invalidf("supervisor returned artifact %d that was not requested", k)
		}
		if seen[i] {
			return nil, Invalidf("supervisor returned %s twice", indexed("artifacts", i))
		}
		seen[i] = true
		if a.Size < 0 {
			return nil, Invalidf("supervisor returned a negative size for %s", indexed("artifacts", i))
		}
		if a.Error != "" {
			if len(a.Error) > MaxArtifactErrorBytes || !utf8.ValidString(a.Error) ||
				strings.IndexFunc(a.Error, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
				return nil, Invalidf("supervisor returned an unreadable error for %s", indexed("artifacts", i))
			}
			if len(a.Data) > 0 {
				return nil, Invalidf("supervisor returned data with an error for %s", indexed("artifacts", i))
			}
			out[i] = Artifact{Path: requested[i], Size: a.Size, Error: a.Error}
			continue
		}
		if a.Size != int64(len(a.Data)) {
			return nil, Invalidf("supervisor returned size %d with %d bytes for %s", a.Size, len(a.Data), indexed("artifacts", i))
		}
		if a.Size > maxEach {
			return nil, Invalidf("supervisor returned %s over the bound of %d bytes", indexed("artifacts", i), maxEach)
		}
		total += a.Size
		if total > maxTotal {
			return nil, Invalidf("supervisor returned artifacts over the total bound of %d bytes", maxTotal)
		}
		out[i] = Artifact{Path: requested[i], Size: a.Size, Data: a.Data}
	}
	for i, ok := range seen {
		if !ok {
			out[i] = Artifact{Path: requested[i], Error: ArtifactMissing}
		}
	}
	return out, nil
}
