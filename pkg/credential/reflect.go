package credential

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
)

// Forms returns the encodings of a secret that Reflected looks for: raw,
// URL query and path escaped, base64 standard and URL alphabets with and
// without padding, hex in lower and upper case, and the base64 runs of the
// secret at the two other byte alignments (a secret embedded in a longer
// base64 text). Duplicates are removed.
func Forms(s Secret) []string {
	v := s.v
	if v == "" {
		return nil
	}
	b := []byte(v)
	forms := []string{
		v,
		url.QueryEscape(v),
		url.PathEscape(v),
		base64.StdEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b),
		strings.ToUpper(hex.EncodeToString(b)),
	}
	// Unaligned base64: encode k filler bytes plus the secret and keep only
	// the characters fully determined by the secret's bits.
	if len(b) >= 6 {
		for k := 1; k <= 2; k++ {
			padded := append(make([]byte, k), b...)
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				e := enc.EncodeToString(padded)
				first := (8*k + 5) / 6
				last := (8 * (k + len(b))) / 6
				if last > len(e) {
					last = len(e)
				}
				if first < last {
					forms = append(forms, e[first:last])
				}
			}
		}
	}
	seen := make(map[string]bool, len(forms))
	out := forms[:0]
	for _, f := range forms {
		if f != "" && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// Reflected reports whether any string in the decoded JSON value v (object
// keys included, numbers by their literal text) contains any form of any of
// the secrets. v is what json.Unmarshal produces into an any (with or
// without UseNumber). Detection is defence in depth for trusted upstreams,
// not a guarantee against every encoding or a secret's fragments.
func Reflected(v any, secrets ...Secret) bool {
	var forms []string
	for _, s := range secrets {
		forms = append(forms, Forms(s)...)
	}
	if len(forms) == 0 {
		return false
	}
	return walk(v, forms, 0)
}

func contains(s string, forms []string) bool {
	for _, f := range forms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

func walk(v any, forms []string, depth int) bool {
	if depth > 10_000 { // encoding/json refuses deeper input anyway
		return true
	}
	switch x := v.(type) {
	case string:
		return contains(x, forms)
	case json.Number:
		return contains(string(x), forms)
	case map[string]any:
		for k, e := range x {
			if contains(k, forms) || walk(e, forms, depth+1) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if walk(e, forms, depth+1) {
				return true
			}
		}
	}
	return false
}
