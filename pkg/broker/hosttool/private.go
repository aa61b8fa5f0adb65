package hosttool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
)

// MaxPrincipalChars bounds a privateTo value (richproto.MaxIDChars).
const MaxPrincipalChars = 256

// The private envelope (issue 16, the seed's PiToolResponse.privateTo): an
// exec tool's stdout or an http tool's response body that is a JSON object
// with a "privateTo" member must be exactly
//
//	{"privateTo": "<the bound turn's principal id>", "result": <any JSON value>}
//
// and then only the bound turn's principal may read result again; the
// worker shows every other reader placeholders. An output without a
// top-level "privateTo" member is public, as before.
const (
	privateKey = "privateTo"
	resultKey  = "result"
)

// SplitPrivate turns tool output into its result value and, for the private
// envelope, the principal it is private to. It fails closed: an envelope
// with any other member, a duplicate key, a privateTo that is not a string,
// not a valid principal id, or not exactly the bound principal (principal;
// "" when the turn has none, which refuses every envelope) is ErrFailed,
// and nothing of the output is answered.
func SplitPrivate(out []byte, principal string) (json.RawMessage, string, error) {
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return Result(out), "", nil
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(trimmed, &members) != nil {
		return Result(out), "", nil
	}
	if _, private := members[privateKey]; !private {
		return Result(out), "", nil
	}
	// A duplicate key could show one privateTo here and another to a
	// reader of the raw output: refused.
	if _, err := strictjson.DecodeObject(trimmed); err != nil {
		return nil, "", fmt.Errorf("hosttool: private envelope malformed: %w", ErrFailed)
	}
	result, ok := members[resultKey]
	if !ok || len(members) != 2 {
		return nil, "", fmt.Errorf("hosttool: private envelope needs exactly privateTo and result: %w", ErrFailed)
	}
	var to string
	if json.Unmarshal(members[privateKey], &to) != nil {
		return nil, "", fmt.Errorf("hosttool: privateTo is not a string: %w", ErrFailed)
	}
	if err := ValidPrincipal(to); err != nil {
		return nil, "", err
	}
	if principal == "" {
		return nil, "", fmt.Errorf("hosttool: privateTo in a turn without a principal: %w", ErrFailed)
	}
	if to != principal {
		return nil, "", fmt.Errorf("hosttool: privateTo names another principal: %w", ErrFailed)
	}
	return json.RawMessage(bytes.TrimSpace(result)), to, nil
}

// ValidPrincipal checks the shape of a principal id: 1 to
// MaxPrincipalChars characters of UTF-8, no control or format character,
// no leading or trailing space.
func ValidPrincipal(s string) error {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > MaxPrincipalChars {
		return fmt.Errorf("hosttool: privateTo must be 1 to %d characters of UTF-8: %w", MaxPrincipalChars, ErrFailed)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
			return fmt.Errorf("hosttool: privateTo holds a control character: %w", ErrFailed)
		}
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return fmt.Errorf("hosttool: privateTo has a leading or trailing space: %w", ErrFailed)
	}
	return nil
}
