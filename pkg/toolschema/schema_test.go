package toolschema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

func TestCheck(t *testing.T) {
	cases := []struct {
		schema string
		ok     bool
	}{
		{`true`, true},
		{`{"type":"object","properties":{"$ref":{"type":"string"}}}`, true},
		{`{"properties":{"$schema":{"$ref":"#/$defs/x"}},"$defs":{"x":true}}`, true},
		{`{"enum":["$ref"],"const":"$ref","default":{"id":"http://y"},"examples":[{"schema":"http://z"}]}`, true},
		{`{"$ref":"#"}`, true},
		{`{"$id":"#anchor"}`, true},
		{`{"items":{"items":{"items":{"$ref":"#/a"}}}}`, true},
		{`{"dependencies":{"a":["$ref"],"b":{"$ref":"#/c"}}}`, true},
		{`{"$ref":"https://x"}`, false},
		{`{"$ref":""}`, false},
		{`{"$ref":"x.json"}`, false},
		{`{"$ref":1}`, false},
		{`{"$dynamicRef":"http://x#meta"}`, false},
		{`{"$recursiveRef":"x"}`, false},
		{`{"$id":"urn:x"}`, false},
		// $schema: a dialect declaration, anywhere, never a document to load.
		{`{"$schema":"http://json-schema.org/draft-07/schema#"}`, true},
		{`{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"a":{"$schema":"http://json-schema.org/draft-07/schema"}}}`, true},
		{`{"examples":[{"$schema":"https://json-schema.org/draft/2019-09/schema"}]}`, true},
		{`{"$schema":"https://evil.example/draft-07/schema#"}`, false},
		{`{"$schema":"http://json-schema.org/draft-03/schema#"}`, false},
		{`{"$schema":"http://json-schema.org/draft-07/schema#/definitions"}`, false},
		{`{"$schema":"http://json-schema.org/draft-07/schema.json"}`, false},
		{`{"$schema":"ftp://json-schema.org/draft-07/schema#"}`, false},
		{`{"$schema":"#"}`, false},
		{`{"$schema":""}`, false},
		{`{"$schema":7}`, false},
		{`{"x-a":[{"$schema":"https://evil.example/s.json"}]}`, false},
		{`{"$vocabulary":{"https://x":true}}`, false},
		{`{"$vocabulary":"#x"}`, false},
		{`{"properties":{"a":{"$ref":"https://x"}}}`, false},
		{`{"properties":{"$ref":{"$ref":"https://x"}}}`, false},
		{`{"dependencies":{"b":{"$ref":"https://x"}}}`, false},
		{`{"items":[{"$ref":"https://x"}]}`, false},
		{`{"allOf":{"$ref":"#"}}`, false},
		{`{"properties":[]}`, false},
		{`"string"`, false},
		{`{"x-vendor":{"$ref":"https://x"}}`, false},
		// Issue 18 item 5: every value is walked, arrays under unknown or
		// data keywords included.
		{`{"x-any":[{"$ref":"https://evil.example/s.json"}]}`, false},
		{`{"type":[{"$ref":"https://evil.example/s.json"}]}`, false},
		{`{"extends":[{"$ref":"https://evil.example/s.json"}]}`, false},
		{`{"extends":{"$ref":"https://evil.example/s.json"}}`, false},
		{`{"x-a":[[{"x-b":[{"$ref":"https://evil.example/s.json"}]}]]}`, false},
		{`{"x-a":{"b":[1,{"$id":"https://evil.example/"}]}}`, false},
		{`{"x-a":[{"$dynamicRef":"https://evil.example/#m"}]}`, false},
		{`{"x-a":[{"$vocabulary":{"https://evil.example/v":true}}]}`, false},
		{`{"x-a":[{"$ref":{"$ref":"https://evil.example/"}}]}`, false},
		{`{"description":{"$ref":"https://evil.example/"}}`, false},
		{`{"required":[{"$ref":"https://evil.example/"}]}`, false},
		{`{"dependencies":{"a":[{"$ref":"https://evil.example/"}]}}`, false},
		{`{"dependentRequired":{"a":[{"$ref":"https://evil.example/"}]}}`, false},
		// Data keywords hold instances, not schemas, but a generic
		// dereferencer on the way to a model resolves every $ref it meets.
		{`{"enum":[{"$ref":"https://evil.example/"}]}`, false},
		{`{"const":{"$ref":"https://evil.example/"}}`, false},
		{`{"default":{"a":{"$id":"https://evil.example/"}}}`, false},
		{`{"examples":[{"$schema":"https://evil.example/"}]}`, false},
		{`{"properties":{"a":{"default":[{"$ref":"https://evil.example/"}]}}}`, false},
		// Local references and the words as names or plain data stay fine.
		{`{"x-any":[{"$ref":"#/$defs/a"}],"$defs":{"a":true}}`, true},
		{`{"x-any":[1,"https://evil.example/",null,[true]],"type":["string","null"]}`, true},
		{`{"enum":["$ref","https://evil.example/"],"const":{"ref":"https://x"}}`, true},
		{`{"extends":[{"$ref":"#"}]}`, true},
	}
	for _, c := range cases {
		err := Check(decode(t, c.schema))
		if (err == nil) != c.ok {
			t.Errorf("Check(%s) = %v, want ok=%v", c.schema, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%s) error %v is not ErrInvalid", c.schema, err)
		}
	}
	deep := "true"
	for i := 0; i < MaxDepth+2; i++ {
		deep = `{"not":` + deep + `}`
	}
	if Check(decode(t, deep)) == nil {
		t.Error("over-deep schema accepted")
	}
}

// TestWhere: a refusal names where it happened (for the operator's own
// configuration), while its message quotes nothing of the input.
func TestWhere(t *testing.T) {
	for _, c := range []struct{ schema, at string }{
		{`{"$ref":"https://x"}`, "#/$ref"},
		{`{"properties":{"a/b~":{"items":[true,{"$id":"https://x"}]}}}`, "#/properties/a~1b~0/items/1/$id"},
		{`{"x-any":[{"":{"$ref":"https://x"}}]}`, "#/x-any/0//$ref"},
		{`{"type":[{"$ref":"https://evil.example/s.json"}]}`, "#/type/0/$ref"},
	} {
		err := Check(decode(t, c.schema))
		if got := Where(err); got != c.at {
			t.Errorf("Where(Check(%s)) = %q, want %q", c.schema, got, c.at)
		}
		if err != nil && (strings.Contains(err.Error(), "https://") || strings.Contains(err.Error(), "x-any") || strings.Contains(err.Error(), "a~1b")) {
			t.Errorf("error %q quotes input", err)
		}
	}
	if Where(errors.New("x")) != "" || Where(nil) != "" {
		t.Error("Where of a foreign error is not empty")
	}
}

// FuzzCheck: Check never panics, and whatever it accepts holds no member
// named like a reference keyword with a non-local string, outside the names
// of a properties-like map (checked by a naive walk that allows those only
// where their value is an object, the way a schema under a name is).
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"$ref":{"type":"string"}}}`,
		`{"x-any":[{"$ref":"https://evil.example/s.json"}]}`,
		`{"extends":[{"$ref":"#"}]}`,
		`{"enum":[{"$ref":"#/a"}],"items":[{"$id":"#x"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			return
		}
		if Check(v) != nil {
			return
		}
		if bad := remoteRef(v); bad != "" {
			t.Fatalf("accepted %s holding %s", data, bad)
		}
	})
}

// remoteRef is the naive oracle: any member named like a reference keyword
// holding a string that is not a local fragment.
func remoteRef(v any) string {
	switch s := v.(type) {
	case []any:
		for _, e := range s {
			if bad := remoteRef(e); bad != "" {
				return bad
			}
		}
	case map[string]any:
		for k, e := range s {
			switch k {
			case "$ref", "$dynamicRef", "$recursiveRef", "$id":
				if str, ok := e.(string); ok && !strings.HasPrefix(str, "#") {
					return k + "=" + str
				}
			case "$schema":
				if str, ok := e.(string); ok && !strings.HasPrefix(str, "http://json-schema.org/draft") && !strings.HasPrefix(str, "https://json-schema.org/draft") {
					return k + "=" + str
				}
			case "$vocabulary":
				if m, ok := e.(map[string]any); ok {
					for uri := range m {
						if !strings.HasPrefix(uri, "#") {
							return k + "=" + uri
						}
					}
				}
			}
			if bad := remoteRef(e); bad != "" {
				return bad
			}
		}
	}
	return ""
}

func TestKnownDialect(t *testing.T) {
	for _, c := range []struct {
		uri string
		ok  bool
	}{
		{"http://json-schema.org/draft-04/schema#", true},
		{"http://json-schema.org/draft-06/schema#", true},
		{"http://json-schema.org/draft-07/schema#", true},
		{"https://json-schema.org/draft-07/schema", true},
		{"https://json-schema.org/draft/2019-09/schema", true},
		{"https://json-schema.org/draft/2020-12/schema", true},
		{"http://json-schema.org/draft/2020-12/schema#", true},
		{"http://json-schema.org/draft-03/schema#", false},
		{"http://json-schema.org/schema#", false}, // "latest": a moving target
		{"http://json-schema.org/draft-07/schema##", false},
		{"HTTP://json-schema.org/draft-07/schema#", false},
		{"http://json-schema.org.evil.example/draft-07/schema#", false},
		{"http://user@json-schema.org/draft-07/schema#", false},
		{"//json-schema.org/draft-07/schema#", false},
		{"json-schema.org/draft-07/schema", false},
		{"", false},
	} {
		if got := KnownDialect(c.uri); got != c.ok {
			t.Errorf("KnownDialect(%q) = %v, want %v", c.uri, got, c.ok)
		}
	}
}

func TestWithoutDialect(t *testing.T) {
	in := decode(t, `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"$schema":"x"}}}`)
	got, _ := json.Marshal(WithoutDialect(in))
	if want := `{"properties":{"a":{"$schema":"x"}},"type":"object"}`; string(got) != want {
		t.Errorf("WithoutDialect = %s, want %s", got, want)
	}
	if _, ok := in.(map[string]any)["$schema"]; !ok {
		t.Error("WithoutDialect changed its input")
	}
	for _, v := range []any{true, nil, "s", decode(t, `{"type":"object"}`)} {
		a, _ := json.Marshal(v)
		b, _ := json.Marshal(WithoutDialect(v))
		if string(a) != string(b) {
			t.Errorf("WithoutDialect(%s) = %s", a, b)
		}
	}
}

// BenchmarkCheck: a tool schema near protocol.MaxSchemaBytes (16 KiB) of
// properties with enums and defaults, the shape a big MCP tool has.
func BenchmarkCheck(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{`)
	for i := 0; sb.Len() < 15<<10; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`"p` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `":{"type":["string","null"],"enum":["a","b","c"],"default":{"k":[1,2,{"v":"w"}]},"description":"d"}`)
	}
	sb.WriteString(`},"additionalProperties":false}`)
	var v any
	if err := json.Unmarshal([]byte(sb.String()), &v); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(sb.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if err := Check(v); err != nil {
			b.Fatal(err)
		}
	}
}
