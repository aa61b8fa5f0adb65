package delegation

import (
	"regexp"
	"strings"
	"unicode"
)

// Redacted replaces what Scrub removes.
const Redacted = "[redacted]"

// scrubRules remove credential-shaped text: authorization schemes with
// their value, key=value pairs whose key names a secret, URL user
// information, well-known token prefixes and any long unbroken run of
// token characters (keys, JWTs, hex and base64 blobs). Order matters: the
// specific rules keep the words around the value readable.
var scrubRules = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{6,}`), "${1}${2}" + Redacted},
	{regexp.MustCompile(`(?i)\b((?:x-)?api[_-]?key|access[_-]?token|refresh[_-]?token|auth[_-]?token|token|secret|client[_-]?secret|password|passwd|pwd|credential|credentials|authorization|cookie|session)(["']?\s*[:=]\s*["']?)[^\s"',;&}]+`), "${1}${2}" + Redacted},
	{regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@`), "${1}" + Redacted + "@"},
	{regexp.MustCompile(`\b(?:sk|pk|rk|ghp|gho|ghu|ghs|ghr|github_pat|glpat|xox[abprs]|AKIA|ASIA|AIza|ya29)[-_.A-Za-z0-9]{8,}`), Redacted},
	{regexp.MustCompile(`[A-Za-z0-9+/_=.-]{32,}`), Redacted},
}

// Scrub redacts credential-shaped text and flattens control characters to
// spaces (a diagnostic is one line).
func Scrub(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	for _, r := range scrubRules {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return strings.TrimSpace(s)
}

// Diagnostic is a failed job's reason as a client sees it: scrubbed, then
// cut to max characters (the seed's scrubDiagnostic).
func Diagnostic(reason string, max int) string {
	d, _ := cutRunes(Scrub(reason), max)
	return d
}
