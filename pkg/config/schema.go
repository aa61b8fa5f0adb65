package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// errRemote is what the refusing loader answers for every URL.
var errRemote = errors.New("remote schema loading is refused")

type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) { return nil, errRemote }

// refKeywords may hold only local fragments ("#...") wherever a schema sits.
var refKeywords = []string{"$ref", "$dynamicRef", "$recursiveRef", "$id", "$schema", "$vocabulary"}

// CompileSchema checks a tool's parameters: a JSON object of at most
// protocol.MaxSchemaBytes that compiles as a JSON Schema with every reference
// local and no remote loading.
func CompileSchema(params string) error {
	if len(params) > protocol.MaxSchemaBytes {
		return fmt.Errorf("over %d bytes", protocol.MaxSchemaBytes)
	}
	var obj map[string]any
	if params == "" || json.Unmarshal([]byte(params), &obj) != nil || obj == nil {
		return errors.New(`must be a JSON Schema object written as a JSON string, e.g. '{"type":"object","properties":{}}'`)
	}
	if t, ok := obj["type"]; !ok || t != "object" {
		return errors.New(`must have "type": "object"`)
	}
	if err := localRefsOnly(obj, "#"); err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(params))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	const loc = "urn:roundtable-sandbox:tool-parameters"
	if err := c.AddResource(loc, doc); err != nil {
		return fmt.Errorf("schema: %v", err)
	}
	if _, err := c.Compile(loc); err != nil {
		return fmt.Errorf("schema does not compile: %v", err)
	}
	return nil
}

// Keywords whose value is a schema, a map of schemas, or a list of schemas.
var (
	schemaKeys    = []string{"not", "if", "then", "else", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "contains", "propertyNames", "additionalItems", "items"}
	schemaMapKeys = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
	schemaListKey = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
)

// localRefsOnly walks real schema positions only (not property names, enum or
// const data) and refuses reference keywords that are not local fragments.
func localRefsOnly(v any, at string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil // booleans and non-schemas carry no references
	}
	for _, k := range refKeywords {
		raw, present := obj[k]
		if !present {
			continue
		}
		s, isStr := raw.(string)
		if !isStr || !strings.HasPrefix(s, "#") {
			return fmt.Errorf("%s at %s must be a local fragment (#...); remote references are refused", k, at)
		}
	}
	for _, k := range schemaKeys {
		if sub, ok := obj[k]; ok {
			if err := localRefsOnly(sub, at+"/"+k); err != nil {
				return err
			}
		}
	}
	for _, k := range schemaMapKeys {
		if m, ok := obj[k].(map[string]any); ok {
			for name, sub := range m {
				if err := localRefsOnly(sub, at+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range schemaListKey {
		if list, ok := obj[k].([]any); ok {
			for i, sub := range list {
				if err := localRefsOnly(sub, fmt.Sprintf("%s/%s/%d", at, k, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
