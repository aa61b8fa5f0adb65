package credential

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const secretValue = "sk-test-REAL/secret+value=42?&x"

func TestSecretNeverRevealed(t *testing.T) {
	s := NewSecret(secretValue)
	var logBuf bytes.Buffer
	slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("x", "cred", s, "group", struct{ S Secret }{s})
	js, _ := json.Marshal(map[string]any{"s": s})
	outs := map[string]string{
		"String": s.String(), "%v": fmt.Sprintf("%v", s), "%s": fmt.Sprintf("%s", s), "%q": fmt.Sprintf("%q", s),
		"%#v": fmt.Sprintf("%#v", s), "%x": fmt.Sprintf("%x", s), "%+v struct": fmt.Sprintf("%+v", struct{ S Secret }{s}),
		"json": string(js), "slog": logBuf.String(), "error": fmt.Errorf("wrap %v", s).Error(),
	}
	for name, out := range outs {
		if strings.Contains(out, secretValue) || strings.Contains(out, "REAL") {
			t.Errorf("%s reveals the secret: %q", name, out)
		}
		if !strings.Contains(out, "redacted") {
			t.Errorf("%s = %q, want [redacted]", name, out)
		}
	}
	if s.Reveal() != secretValue {
		t.Errorf("Reveal = %q", s.Reveal())
	}
}

func TestDirLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("model", "abc\n")
	write("crlf", "abc\r\n")
	write("two-newlines", "abc\n\n")
	write("empty", "")
	write("newline-only", "\n")
	write("ctrl", "ab\x00c")
	write("big", strings.Repeat("a", MaxBytes+1))
	write("max", strings.Repeat("a", MaxBytes))
	os.Symlink(filepath.Join(dir, "model"), filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o700)
	d, err := OpenDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		want    string
		wantErr error
	}{
		{"model", "abc", nil},
		{"crlf", "abc", nil},
		{"two-newlines", "", ErrInvalid},
		{"max", strings.Repeat("a", MaxBytes), nil},
		{"missing", "", ErrMissing},
		{"empty", "", ErrMissing},
		{"newline-only", "", ErrMissing},
		{"ctrl", "", ErrInvalid},
		{"big", "", ErrInvalid},
		{"link", "", ErrInvalid},
		{"sub", "", ErrInvalid},
		{"../model", "", ErrInvalid},
		{".hidden", "", ErrInvalid},
		{"", "", ErrInvalid},
		{"a/b", "", ErrInvalid},
	}
	for _, c := range cases {
		got, err := d.Load(c.name)
		if c.wantErr != nil {
			if !errors.Is(err, c.wantErr) {
				t.Errorf("Load(%q) err = %v, want %v", c.name, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.Reveal() != c.want {
			t.Errorf("Load(%q) = %d bytes, %v; want %d bytes", c.name, len(got.Reveal()), err, len(c.want))
		}
	}
	// Rotation: a rewritten file is read on the next call.
	write("model", "rotated\n")
	if got, _ := d.Load("model"); got.Reveal() != "rotated" {
		t.Errorf("after rotation got %q", got.Reveal())
	}
	// The systemd naming: LoadCredential=sandbox:<dir> makes sandbox_<name>.
	write("sandbox_model", "prefixed\n")
	p, err := OpenDir(dir, "sandbox_")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Load("model"); err != nil || got.Reveal() != "prefixed" {
		t.Errorf("prefixed Load = %v", err)
	}
	if _, err := p.Load("crlf"); !errors.Is(err, ErrMissing) {
		t.Errorf("prefixed Load of an unprefixed file = %v, want ErrMissing", err)
	}
	for _, bad := range []string{"../", "a/b", ".x"} {
		if _, err := OpenDir(dir, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("OpenDir prefix %q = %v", bad, err)
		}
	}
	if _, err := OpenDir(filepath.Join(dir, "nope"), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("OpenDir(missing) = %v", err)
	}
	if _, err := OpenDir("", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("OpenDir(\"\") = %v", err)
	}
}

func TestReflected(t *testing.T) {
	s := NewSecret(secretValue)
	b := []byte(secretValue)
	encodings := map[string]string{
		"raw":           secretValue,
		"query":         url.QueryEscape(secretValue),
		"path":          url.PathEscape(secretValue),
		"b64 std":       base64.StdEncoding.EncodeToString(b),
		"b64 std raw":   base64.RawStdEncoding.EncodeToString(b),
		"b64 url":       base64.URLEncoding.EncodeToString(b),
		"b64 url raw":   base64.RawURLEncoding.EncodeToString(b),
		"hex lower":     hex.EncodeToString(b),
		"hex upper":     strings.ToUpper(hex.EncodeToString(b)),
		"b64 offset 1":  base64.StdEncoding.EncodeToString(append([]byte("x"), b...)),
		"b64 offset 2":  base64.StdEncoding.EncodeToString(append([]byte("xy"), b...)),
		"b64u offset 1": base64.URLEncoding.EncodeToString(append([]byte("x"), b...)),
	}
	if url.QueryEscape(secretValue) == url.PathEscape(secretValue) || url.QueryEscape(secretValue) == secretValue {
		t.Fatal("test secret must make the URL encodings differ")
	}
	for name, enc := range encodings {
		for _, shape := range []string{`{"a":%s}`, `{"a":[1,{"b":%s}]}`, `{%s:1}`, `[{"deep":{"deeper":[%s]}}]`} {
			text := "prefix " + enc + " suffix"
			doc := fmt.Sprintf(shape, mustJSON(text))
			var v any
			dec := json.NewDecoder(strings.NewReader(doc))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			if !Reflected(v, s) {
				t.Errorf("%s in %s: not detected", name, shape)
			}
		}
	}
	// JSON escapes are decoded before checking.
	var v any
	json.Unmarshal([]byte(`{"a":"\u0073k-test-REAL\/secret+value=42?&x"}`), &v)
	if !Reflected(v, s) {
		t.Error("unicode-escaped secret not detected")
	}
	for _, clean := range []string{`{"a":"hello"}`, `{"sk-test":"REAL"}`, `[]`, `{"n":123}`} {
		var v any
		json.Unmarshal([]byte(clean), &v)
		if Reflected(v, s) {
			t.Errorf("%s: false positive", clean)
		}
	}
	if Reflected(map[string]any{"a": ""}, Secret{}) {
		t.Error("empty secret must never match")
	}
	if !Reflected(map[string]any{"n": json.Number("12345678")}, NewSecret("12345678")) {
		t.Error("numeric secret in a number not detected")
	}
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
