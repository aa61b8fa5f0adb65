package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/toolschema"
)

// errRemote is what the refusing loader answers for every URL.
var errRemote = errors.New("remote schema loading is refused")

type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) { return nil, errRemote }

// CompileSchema checks a tool's parameters: a JSON object of at most
// protocol.MaxSchemaBytes that passes toolschema.Check (no remote reference
// anywhere) and compiles as a JSON Schema with no remote loading.
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
	// The broker's own check, so a configuration that loads is never refused
	// at a turn's model call.
	if err := toolschema.Check(obj); err != nil {
		return fmt.Errorf("at %s: %s", toolschema.Where(err), strings.TrimPrefix(err.Error(), "schema: "))
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
