package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// wireTypes names the Go type behind each schema of the document: a field
// added to one of them, or a type added to the API, fails until the
// document says it.
var wireTypes = map[string]reflect.Type{
	"ErrorResponse":     reflect.TypeFor[apiwire.ErrorResponse](),
	"Health":            reflect.TypeFor[apiwire.Health](),
	"Speaker":           reflect.TypeFor[apiwire.Speaker](),
	"Attachment":        reflect.TypeFor[richproto.Attachment](),
	"File":              reflect.TypeFor[richproto.File](),
	"TurnRequest":       reflect.TypeFor[apiwire.TurnRequest](),
	"TurnResponse":      reflect.TypeFor[apiwire.Reply](),
	"RichStatus":        reflect.TypeFor[apiwire.RichSession](),
	"AdmissionStatus":   reflect.TypeFor[apiwire.Admission](),
	"ChannelStatus":     reflect.TypeFor[apiwire.Channel](),
	"ChannelList":       reflect.TypeFor[apiwire.ChannelList](),
	"ModeRequest":       reflect.TypeFor[apiwire.ModeRequest](),
	"CancelResponse":    reflect.TypeFor[apiwire.Cancel](),
	"ActiveTurn":        reflect.TypeFor[apiwire.Turn](),
	"TurnList":          reflect.TypeFor[apiwire.TurnList](),
	"RunParams":         reflect.TypeFor[runs.Params](),
	"RunArtifact":       reflect.TypeFor[runs.Artifact](),
	"RunStatus":         reflect.TypeFor[runs.Status](),
	"RunList":           reflect.TypeFor[coderun.RunList](),
	"Credential":        reflect.TypeFor[runs.Credential](),
	"CredentialList":    reflect.TypeFor[runs.CredentialList](),
	"RunEvent":          reflect.TypeFor[runs.Event](),
	"JobAuthor":         reflect.TypeFor[delegation.Author](),
	"DelegationRequest": reflect.TypeFor[delegation.Request](),
	"JobStatus":         reflect.TypeFor[delegation.Status](),
	"JobEvent":          reflect.TypeFor[delegation.Event](),
	"PrecheckGrant":     reflect.TypeFor[precheck.Grant](),
	"PrecheckRequest":   reflect.TypeFor[precheck.Request](),
	"PrecheckAnswer":    reflect.TypeFor[precheck.Answer](),
	"SessionCreate":     reflect.TypeFor[apiwire.SessionCreate](),
	"Session":           reflect.TypeFor[apiwire.Session](),
	"SessionList":       reflect.TypeFor[apiwire.SessionList](),
	"SessionExec":       reflect.TypeFor[apiwire.SessionExec](),
	"SessionExecEvent":  reflect.TypeFor[apiwire.SessionExecEvent](),
	"SessionExecResult": reflect.TypeFor[apiwire.SessionExecResult](),
	"SessionCancel":     reflect.TypeFor[apiwire.SessionCancel](),
	"SessionDecision":   reflect.TypeFor[apiwire.SessionDecision](),
	"SessionApproval":   reflect.TypeFor[apiwire.SessionApproval](),
	"SessionPath":       reflect.TypeFor[apiwire.SessionPath](),
	"SessionPut":        reflect.TypeFor[apiwire.SessionPut](),
	"SessionFile":       reflect.TypeFor[apiwire.SessionFile](),
	"SessionEntry":      reflect.TypeFor[apiwire.SessionEntry](),
	"SessionListing":    reflect.TypeFor[apiwire.SessionListing](),
}

// A schema as far as the checks read it.
type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	ContentEncoding      string             `json:"contentEncoding"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	AdditionalProperties *bool              `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Examples             []json.RawMessage  `json:"examples"`
}

type media struct {
	Schema *schema `json:"schema"`
}

type operation struct {
	OperationID string `json:"operationId"`
	Role        string `json:"x-sandbox-role"`
	RequestBody *struct {
		Content map[string]media `json:"content"`
	} `json:"requestBody"`
	Parameters []struct {
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
	Responses map[string]struct {
		Ref     string           `json:"$ref"`
		Content map[string]media `json:"content"`
	} `json:"responses"`
}

type document struct {
	OpenAPI    string                          `json:"openapi"`
	Paths      map[string]map[string]operation `json:"paths"`
	Components struct {
		Schemas   map[string]*schema `json:"schemas"`
		Responses map[string]struct {
			Content map[string]media `json:"content"`
		} `json:"responses"`
	} `json:"components"`
}

func readDoc(t *testing.T, data []byte) document {
	t.Helper()
	var d document
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return d
}

// docRoutes lists "METHOD pattern role" of the document's operations.
func docRoutes(d document) []string {
	var out []string
	for p, ops := range d.Paths {
		for m, op := range ops {
			out = append(out, strings.ToUpper(m)+" "+p+" "+op.Role)
		}
	}
	sort.Strings(out)
	return out
}

func tableRoutes(eps []api.Endpoint) []string {
	var out []string
	for _, ep := range eps {
		out = append(out, ep.Method+" "+ep.Pattern+" "+ep.Role.String())
	}
	sort.Strings(out)
	return out
}

// routeDiff names each route one side has and the other lacks.
func routeDiff(doc, table []string) []string {
	var out []string
	for _, r := range table {
		if !slices.Contains(doc, r) {
			out = append(out, "served, not in the document: "+r)
		}
	}
	for _, r := range doc {
		if !slices.Contains(table, r) {
			out = append(out, "in the document, not served: "+r)
		}
	}
	return out
}

// TestOpenAPIRoutesAreTheTable: the document has exactly the router's
// routes, each at the role the router checks.
func TestOpenAPIRoutesAreTheTable(t *testing.T) {
	d := readDoc(t, api.OpenAPI)
	if d.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", d.OpenAPI)
	}
	for _, m := range routeDiff(docRoutes(d), tableRoutes(host.Endpoints())) {
		t.Error(m)
	}
}

// The check itself: a route added to the table, or one the table lost,
// is named.
func TestRouteDiff(t *testing.T) {
	doc := []string{"GET /a client", "GET /b none"}
	for _, tc := range []struct {
		name  string
		table []string
		want  []string
	}{
		{"same", []string{"GET /a client", "GET /b none"}, nil},
		{"added", []string{"GET /a client", "GET /b none", "POST /c admin"}, []string{"served, not in the document: POST /c admin"}},
		{"role", []string{"GET /a admin", "GET /b none"}, []string{"served, not in the document: GET /a admin", "in the document, not served: GET /a client"}},
	} {
		if got := routeDiff(doc, tc.table); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// jsonFields is a struct type's JSON properties: name -> (field type,
// omitempty).
func jsonFields(ty reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range ty.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func omitempty(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	return slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// schemaMismatches compares one schema with its Go type: the same
// properties, each of the JSON type the Go type encodes to, a $ref to the
// schema of the same Go type; a response's required properties are those
// always written.
func schemaMismatches(name string, s *schema, ty reflect.Type, all map[string]*schema, types map[string]reflect.Type) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, name+": "+fmt.Sprintf(format, a...)) }
	fields := jsonFields(ty)
	for p := range fields {
		if _, ok := s.Properties[p]; !ok {
			bad("field %q of %s is not in the document", p, ty)
		}
	}
	for p := range s.Properties {
		if _, ok := fields[p]; !ok {
			bad("property %q is not a field of %s", p, ty)
		}
	}
	for _, r := range s.Required {
		if f, ok := fields[r]; !ok || (s.AdditionalProperties == nil && omitempty(f)) {
			bad("required %q is not always written", r)
		}
	}
	if s.AdditionalProperties == nil { // an answer: what is always written is required
		for p, f := range fields {
			if !omitempty(f) && !slices.Contains(s.Required, p) {
				bad("%q is always written but not required", p)
			}
		}
	}
	for p, f := range fields {
		if ps, ok := s.Properties[p]; ok {
			for _, m := range typeMismatches(ps, f.Type, types) {
				bad("%s: %s", p, m)
			}
		}
	}
	return out
}

func typeMismatches(s *schema, ty reflect.Type, types map[string]reflect.Type) []string {
	if ty.Kind() == reflect.Pointer {
		ty = ty.Elem()
	}
	if s.Ref != "" {
		ref := strings.TrimPrefix(s.Ref, "#/components/schemas/")
		if types[ref] != ty {
			return []string{fmt.Sprintf("$ref %s is not %s", ref, ty)}
		}
		return nil
	}
	want := ""
	switch {
	case ty == rawType:
		return nil // any JSON
	case ty == timeType:
		if s.Type != "string" || s.Format != "date-time" {
			return []string{"a time is a date-time string"}
		}
		return nil
	case ty.Kind() == reflect.Slice && ty.Elem().Kind() == reflect.Uint8:
		if s.Type != "string" || s.ContentEncoding != "base64" {
			return []string{"bytes are a base64 string"}
		}
		return nil
	case ty.Kind() == reflect.String:
		want = "string"
	case ty.Kind() == reflect.Bool:
		want = "boolean"
	case ty.Kind() >= reflect.Int && ty.Kind() <= reflect.Uint64:
		want = "integer"
	case ty.Kind() == reflect.Slice:
		if s.Type != "array" || s.Items == nil {
			return []string{"a slice is an array with items"}
		}
		return typeMismatches(s.Items, ty.Elem(), types)
	case ty.Kind() == reflect.Map && ty.Key().Kind() == reflect.String:
		if s.Type != "object" {
			return []string{"a map is an object"}
		}
		return nil
	case ty.Kind() == reflect.Struct:
		return []string{fmt.Sprintf("struct %s needs a $ref", ty)}
	default:
		return []string{fmt.Sprintf("no JSON type known for %s", ty)}
	}
	if s.Type != want {
		return []string{fmt.Sprintf("type %q, want %q", s.Type, want)}
	}
	return nil
}

// TestOpenAPISchemasAreTheWireTypes: each schema is its Go type's JSON,
// field for field; every schema has its type and every type its schema.
func TestOpenAPISchemasAreTheWireTypes(t *testing.T) {
	d := readDoc(t, api.OpenAPI)
	for name := range d.Components.Schemas {
		if _, ok := wireTypes[name]; !ok {
			t.Errorf("schema %s has no wire type in the test's table", name)
		}
	}
	for name, ty := range wireTypes {
		s, ok := d.Components.Schemas[name]
		if !ok {
			t.Errorf("wire type %s (%s) has no schema", name, ty)
			continue
		}
		for _, m := range schemaMismatches(name, s, ty, d.Components.Schemas, wireTypes) {
			t.Error(m)
		}
	}
}

// The check itself: a field the document lacks, a property the type
// lacks and a wrong type are each named.
func TestSchemaMismatches(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type wire struct {
		ID    string    `json:"id"`
		N     int       `json:"n,omitempty"`
		At    time.Time `json:"at"`
		In    *inner    `json:"in,omitempty"`
		Bytes []byte    `json:"bytes,omitempty"`
	}
	types := map[string]reflect.Type{"Wire": reflect.TypeFor[wire](), "Inner": reflect.TypeFor[inner]()}
	good := func() *schema {
		return &schema{Type: "object", Required: []string{"id", "at"}, Properties: map[string]*schema{
			"id": {Type: "string"}, "n": {Type: "integer"}, "at": {Type: "string", Format: "date-time"},
			"in": {Ref: "#/components/schemas/Inner"}, "bytes": {Type: "string", ContentEncoding: "base64"}}}
	}
	for _, tc := range []struct {
		name   string
		change func(s *schema)
		want   string
	}{
		{"same", func(*schema) {}, ""},
		{"field not documented", func(s *schema) { delete(s.Properties, "n") }, `field "n"`},
		{"property not a field", func(s *schema) { s.Properties["x"] = &schema{Type: "string"} }, `property "x"`},
		{"wrong type", func(s *schema) { s.Properties["n"].Type = "string" }, `type "string", want "integer"`},
		{"wrong ref", func(s *schema) { s.Properties["in"].Ref = "#/components/schemas/Wire" }, "$ref Wire"},
		{"not required", func(s *schema) { s.Required = []string{"id"} }, `"at" is always written`},
	} {
		s := good()
		tc.change(s)
		got := strings.Join(schemaMismatches("Wire", s, types["Wire"], nil, types), "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: got %q, want it to say %q", tc.name, got, tc.want)
		}
	}
}

// TestOpenAPIOperations: every operation names its id; its errors are
// ErrorResponse bodies; a route above RoleNone documents 403, one with a
// path parameter 400 and 404 and the parameter itself; a request body is
// a strict object (DecodeBody refuses unknown fields).
func TestOpenAPIOperations(t *testing.T) {
	d := readDoc(t, api.OpenAPI)
	ids := map[string]bool{}
	for p, ops := range d.Paths {
		for m, op := range ops {
			at := strings.ToUpper(m) + " " + p
			if op.OperationID == "" || ids[op.OperationID] {
				t.Errorf("%s: operationId %q missing or repeated", at, op.OperationID)
			}
			ids[op.OperationID] = true
			need := []string{"500"}
			if op.Role != "none" {
				need = append(need, "403")
			}
			if i := strings.Index(p, "{"); i >= 0 {
				need = append(need, "400", "404")
				name := strings.TrimSuffix(p[i+1:], p[strings.Index(p, "}"):])
				if len(op.Parameters) == 0 || op.Parameters[0].Name != name || op.Parameters[0].In != "path" {
					t.Errorf("%s: parameters %+v, want path parameter %s first", at, op.Parameters, name)
				}
				// Past it, only a query's (the raw file routes').
				for _, q := range op.Parameters[min(1, len(op.Parameters)):] {
					if q.In != "query" {
						t.Errorf("%s: parameter %+v, want one path parameter, then query parameters", at, q)
					}
				}
			}
			for _, c := range need {
				if _, ok := op.Responses[c]; !ok {
					t.Errorf("%s: no %s response", at, c)
				}
			}
			for c, r := range op.Responses {
				if c[0] != '4' && c[0] != '5' {
					continue
				}
				content := r.Content
				if r.Ref != "" {
					content = d.Components.Responses[strings.TrimPrefix(r.Ref, "#/components/responses/")].Content
				}
				if s := content["application/json"].Schema; s == nil || (s.Ref != "#/components/schemas/ErrorResponse" && !(p == "/v1/health" && c == "503")) {
					t.Errorf("%s %s: not an ErrorResponse", at, c)
				}
			}
			if op.RequestBody != nil {
				if raw, ok := op.RequestBody.Content["application/octet-stream"]; ok && len(op.RequestBody.Content) == 1 {
					if raw.Schema == nil || raw.Schema.Type != "string" {
						t.Errorf("%s: an octet-stream body that is not a string", at)
					}
					continue // bytes, bounded by the route (files/raw)
				}
				s := op.RequestBody.Content["application/json"].Schema
				ref := d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
				if ref == nil || ref.AdditionalProperties == nil || *ref.AdditionalProperties {
					t.Errorf("%s: request body %s is not a strict object", at, s.Ref)
				}
			}
		}
	}
}

func compiler(t *testing.T) *jsonschema.Compiler {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(api.OpenAPI))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.AssertContent()
	if err := c.AddResource("file:///openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	return c
}

// fill sets every field of v, recursively, to a value its JSON always
// carries (omitempty fields included), one element per slice.
func fill(v reflect.Value) {
	switch {
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)))
	case v.Type() == rawType:
		v.SetBytes([]byte(`{"type":"object"}`))
	case v.Kind() == reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case v.Kind() == reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case v.Kind() == reflect.String:
		v.SetString("0123456789abcdef0123456789abcdef")
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.Kind() >= reflect.Int && v.Kind() <= reflect.Int64:
		v.SetInt(1)
	case v.Kind() >= reflect.Uint && v.Kind() <= reflect.Uint64:
		v.SetUint(1)
	}
}

// TestOpenAPIValidates: each schema compiles; its examples validate, and
// so does its Go type's JSON with every field set (bar enumerations, whose
// values the filler cannot know: those are checked by the examples).
func TestOpenAPIValidates(t *testing.T) {
	c := compiler(t)
	d := readDoc(t, api.OpenAPI)
	for name, s := range d.Components.Schemas {
		sch, err := c.Compile("file:///openapi.json#/components/schemas/" + name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for i, ex := range s.Examples {
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(ex))
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Validate(inst); err != nil {
				t.Errorf("%s example %d: %v", name, i, err)
			}
		}
		ty, ok := wireTypes[name]
		if !ok {
			continue
		}
		v := reflect.New(ty)
		fill(v.Elem())
		data, _ := json.Marshal(v.Interface())
		inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err := sch.Validate(inst); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "- at ") && !strings.Contains(line, "value must be one of") && !strings.Contains(line, "does not match pattern") &&
					!strings.HasSuffix(line, "validation failed") { // a parent of a cause

					t.Errorf("%s filled: %s", name, line)
				}
			}
		}
	}
}
