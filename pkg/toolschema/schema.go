// Package toolschema checks tool parameter schemas (JSON Schema) wherever
// they enter: the host's configuration and discovered MCP tools
// (pkg/config), and every model request a guest sends (pkg/broker/chat).
// Its guarantee: no remote reference reaches a provider from any position.
// The identifier and reference keywords $ref, $dynamicRef, $recursiveRef,
// $id and $vocabulary hold only local fragments ("#...") wherever they
// occur as an object member: in schemas, under unknown or vendor keywords, in
// arrays, and in data (enum, const, default, examples), because a generic
// dereferencer on the way to a model resolves every $ref it meets. The one
// exception is a name: a property called "$ref" under properties,
// patternProperties, $defs, definitions, dependentSchemas or dependencies of
// a real schema is a name, and its value is checked as a schema.
//
// $schema declares a dialect and is never loaded by anything of ours: it may
// name only the json-schema.org URIs of drafts 04, 06, 07, 2019-09 and
// 2020-12 (http or https, with or without an empty fragment), the dialects
// validators carry built in, so nothing on the way has a reason to fetch it;
// any other value (another host, draft-03, a local fragment) is refused
// wherever it occurs. Compare schemas without it (WithoutDialect).
package toolschema

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalid is the category of every refusal. Messages never quote input.
var ErrInvalid = errors.New("invalid tool schema")

// refusal's message never quotes input; where it happened (a JSON pointer
// made of input keys) is only for the operator's own configuration: Where.
type refusal struct {
	msg, at string
}

func (r *refusal) Error() string { return "schema: " + r.msg }
func (r *refusal) Unwrap() error { return ErrInvalid }

// walker holds the path to the value being walked (a stack of keys and
// indexes); only a refusal renders it.
type walker struct {
	path []seg
}

type seg struct {
	key   string
	index int // -1 for an object member
}

func (w *walker) refuse(msg string) error {
	var b strings.Builder
	b.WriteString("#")
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	for _, s := range w.path {
		b.WriteString("/")
		if s.index < 0 {
			b.WriteString(esc.Replace(s.key))
		} else {
			b.WriteString(strconv.Itoa(s.index))
		}
	}
	return &refusal{msg: msg, at: b.String()}
}

func (w *walker) member(key string) { w.path = append(w.path, seg{key, -1}) }
func (w *walker) elem(index int)    { w.path = append(w.path, seg{"", index}) }
func (w *walker) pop()              { w.path = w.path[:len(w.path)-1] }

// Where returns the JSON pointer ("#/properties/a") of the value a refusal of
// Check names, or "" for other errors. It quotes input keys: show it to the
// operator who wrote the schema, never log it for a guest's.
func Where(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.at
	}
	return ""
}

// MaxDepth bounds nesting (schemas and data alike).
const MaxDepth = 64

// Keyword classes (a switch, not maps: the broker runs this on every model
// request, over every key of every tool schema).
const (
	other  = iota // data, assertion, unknown or vendor keyword: walked as a value
	ref           // may only hold a local fragment ($schema: a known dialect)
	single        // one schema
	list          // an array of schemas
	named         // an object of schemas whose keys are names, not keywords
	items         // one schema, or (older drafts) an array of them
	deps          // dependencies: schemas or arrays of property names
)

func class(k string) int {
	switch k {
	case "$ref", "$dynamicRef", "$recursiveRef", "$id", "$schema", "$vocabulary":
		return ref
	case "additionalItems", "additionalProperties", "unevaluatedItems", "unevaluatedProperties", "contains",
		"propertyNames", "not", "if", "then", "else", "contentSchema":
		return single
	case "allOf", "anyOf", "oneOf", "prefixItems":
		return list
	case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
		return named
	case "items":
		return items
	case "dependencies":
		return deps
	}
	return other
}

// isRef: class(k) == ref, cheaper for the many keys of data that start
// with anything but '$'.
func isRef(k string) bool { return len(k) > 2 && k[0] == '$' && class(k) == ref }

// dialects are the accepted $schema values without scheme and empty fragment.
var dialects = map[string]bool{
	"json-schema.org/draft-04/schema":      true,
	"json-schema.org/draft-06/schema":      true,
	"json-schema.org/draft-07/schema":      true,
	"json-schema.org/draft/2019-09/schema": true,
	"json-schema.org/draft/2020-12/schema": true,
}

// KnownDialect reports whether s is an accepted $schema value.
func KnownDialect(s string) bool {
	s = strings.TrimSuffix(s, "#")
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		rest, ok = strings.CutPrefix(s, "http://")
	}
	return ok && dialects[rest]
}

// WithoutDialect returns schema (a decoded JSON object) without its root
// $schema, for comparing two schemas: the same parameters declared with and
// without a dialect are the same parameters. Other values come back as is.
func WithoutDialect(schema any) any {
	m, ok := schema.(map[string]any)
	if !ok {
		return schema
	}
	if _, has := m["$schema"]; !has {
		return m
	}
	out := make(map[string]any, len(m)-1)
	for k, v := range m {
		if k != "$schema" {
			out[k] = v
		}
	}
	return out
}

// Check walks schema (a decoded JSON value, the root of a schema) and
// refuses remote references anywhere in it.
func Check(schema any) error {
	w := walker{path: make([]seg, 0, 16)}
	return w.check(schema, 0)
}

// check walks a value at a real schema position.
func (w *walker) check(v any, depth int) error {
	if depth > MaxDepth {
		return w.refuse("schema nesting too deep")
	}
	switch s := v.(type) {
	case bool:
		return nil // true / false schemas
	case map[string]any:
		for k, val := range s {
			w.member(k)
			if err := w.keyword(k, val, depth); err != nil {
				return err
			}
			w.pop()
		}
		return nil
	default:
		return w.refuse("a schema must be an object or a boolean")
	}
}

// keyword checks the value val of keyword k (the path ends at val).
func (w *walker) keyword(k string, val any, depth int) error {
	switch class(k) {
	case ref:
		return w.reference(k, val)
	case single:
		return w.check(val, depth+1)
	case items:
		// Draft 2020-12: one schema; older drafts: a schema or an array of them.
		if a, ok := val.([]any); ok {
			return w.each(a, depth)
		}
		return w.check(val, depth+1)
	case list:
		a, ok := val.([]any)
		if !ok {
			return w.refuse("a schema list keyword needs an array")
		}
		return w.each(a, depth)
	case named:
		m, ok := val.(map[string]any)
		if !ok {
			return w.refuse("a schema map keyword needs an object")
		}
		for name, sub := range m {
			w.member(name)
			if err := w.check(sub, depth+1); err != nil {
				return err
			}
			w.pop()
		}
		return nil
	case deps:
		// Values are schemas or arrays of property names.
		m, ok := val.(map[string]any)
		if !ok {
			return w.refuse("dependencies needs an object")
		}
		for name, sub := range m {
			w.member(name)
			var err error
			if names, ok := sub.([]any); ok {
				err = w.value(names, depth+1)
			} else {
				err = w.check(sub, depth+1)
			}
			if err != nil {
				return err
			}
			w.pop()
		}
		return nil
	default:
		// Data keywords (enum, const, default, examples, type, required...),
		// assertions (minimum, pattern...) and unknown or vendor keywords
		// (x-*, draft-03 extends...): whatever they hold is walked whole.
		return w.value(val, depth+1)
	}
}

func (w *walker) each(a []any, depth int) error {
	for i, sub := range a {
		w.elem(i)
		if err := w.check(sub, depth+1); err != nil {
			return err
		}
		w.pop()
	}
	return nil
}

// value walks a value that is not at a known schema position: every array
// element and every object member, at any depth. An object member named like
// a reference keyword must hold a local fragment here too.
func (w *walker) value(v any, depth int) error {
	if depth > MaxDepth {
		return w.refuse("schema nesting too deep")
	}
	switch s := v.(type) {
	case []any:
		for i, e := range s {
			w.elem(i)
			if err := w.value(e, depth+1); err != nil {
				return err
			}
			w.pop()
		}
	case map[string]any:
		for k, e := range s {
			w.member(k)
			var err error
			if isRef(k) {
				err = w.reference(k, e)
			} else {
				err = w.value(e, depth+1)
			}
			if err != nil {
				return err
			}
			w.pop()
		}
	}
	return nil
}

// reference checks the value val of a reference keyword k.
func (w *walker) reference(k string, val any) error {
	if k == "$schema" {
		if s, ok := val.(string); !ok || !KnownDialect(s) {
			return w.refuse("$schema may name only a json-schema.org dialect (draft-04, -06, -07, 2019-09 or 2020-12, http or https); it is a declaration, never loaded")
		}
		return nil
	}
	if k == "$vocabulary" {
		// An object of vocabulary URIs: every key must be local too.
		m, ok := val.(map[string]any)
		if !ok {
			return w.refuse("$vocabulary must be an object")
		}
		for uri := range m {
			if !strings.HasPrefix(uri, "#") {
				return w.refuse("$vocabulary may name only local fragments")
			}
		}
		return nil
	}
	s, ok := val.(string)
	if !ok {
		return w.refuse(k + " must be a string")
	}
	if !strings.HasPrefix(s, "#") {
		return w.refuse(k + " may hold only a local fragment (#...); remote references are refused")
	}
	return nil
}
