package schema

import (
	"encoding/json"
	"errors"
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
		{`{"enum":[{"$ref":"https://x"}],"const":"$ref","default":{"$id":"http://y"},"examples":[{"$schema":"http://z"}]}`, true},
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
		{`{"$schema":"http://json-schema.org/draft-07/schema#"}`, false},
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
