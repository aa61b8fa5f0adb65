// Package placeholder mints the stand-ins a run holds instead of its
// credentials (docs/credentialed-egress.md): 128 random bits behind a
// recognisable prefix, one per credential and run. The run's broker swaps
// a placeholder for the real value in the declared header of its own host
// only. Guarantee: a Placeholder prints, logs and marshals as
// "[placeholder]"; only Reveal returns it, for the run's environment and
// the broker's matching, and nothing logs it.
package placeholder

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
)

// Prefix starts every placeholder, so a person reading a failing request
// (or a scanner) knows it for a sandbox stand-in, not a token.
const Prefix = "rtsbx_ph_"

// Bits is a placeholder's randomness.
const Bits = 128

// Len is a placeholder's length: Prefix and 32 lower-case hex digits.
const Len = len(Prefix) + Bits/4

const redacted = "[placeholder]"

// Placeholder is one run's stand-in for one credential. Its zero value is
// empty.
type Placeholder struct{ v string }

// New mints a placeholder from the system's random source.
func New() (Placeholder, error) {
	var b [Bits / 8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Placeholder{}, fmt.Errorf("placeholder: random source: %w", err)
	}
	return Placeholder{v: Prefix + hex.EncodeToString(b[:])}, nil
}

// Parse returns the placeholder s spells, or false when s is not one.
func Parse(s string) (Placeholder, bool) {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok || len(rest) != Bits/4 {
		return Placeholder{}, false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return Placeholder{}, false
		}
	}
	return Placeholder{v: s}, true
}

// Reveal returns the placeholder's text: for the run's environment and the
// broker's matching only.
func (p Placeholder) Reveal() string { return p.v }

// Empty reports whether p is the zero value.
func (p Placeholder) Empty() bool { return p.v == "" }

// String never reveals the placeholder.
func (p Placeholder) String() string { return redacted }

// GoString never reveals the placeholder (%#v).
func (p Placeholder) GoString() string { return redacted }

// Format never reveals the placeholder, whatever the verb.
func (p Placeholder) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue never reveals the placeholder.
func (p Placeholder) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON never reveals the placeholder.
func (p Placeholder) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText never reveals the placeholder.
func (p Placeholder) MarshalText() ([]byte, error) { return []byte(redacted), nil }
