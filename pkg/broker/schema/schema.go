// Package schema checks guest-supplied JSON Schemas (tool parameters) before
// they travel upstream: the identifier and reference keywords $ref,
// $dynamicRef, $recursiveRef, $id, $schema and $vocabulary are accepted only
// as local fragments ("#..."), so no provider is ever asked to fetch a remote
// document. The walk visits real schema positions only: a property named
// "$ref" or the word inside enum/const/default/examples data is not a keyword.
package schema

import (
	"errors"
	"strings"
)

// ErrInvalid is the category of every refusal. Messages never quote input.
var ErrInvalid = errors.New("invalid tool schema")

type refusal string

func (r refusal) Error() string { return "schema: " + string(r) }
func (r refusal) Unwrap() error { return ErrInvalid }

// MaxDepth bounds schema nesting.
const MaxDepth = 64

// refKeywords may only hold a local fragment.
var refKeywords = map[string]bool{
	"$ref": true, "$dynamicRef": true, "$recursiveRef": true,
	"$id": true, "$schema": true, "$vocabulary": true,
}

// Keywords whose value is one schema.
var single = map[string]bool{
	"additionalItems": true, "additionalProperties": true, "unevaluatedItems": true,
	"unevaluatedProperties": true, "contains": true, "propertyNames": true, "not": true,
	"if": true, "then": true, "else": true, "contentSchema": true,
}

// Keywords whose value is an array of schemas.
var list = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true}

// Keywords whose value is an object of schemas (the keys are names, not keywords).
var named = map[string]bool{
	"properties": true, "patternProperties": true, "$defs": true, "definitions": true,
	"dependentSchemas": true,
}

// Keywords whose value is data, never a schema.
var data = map[string]bool{
	"enum": true, "const": true, "default": true, "examples": true, "example": true,
	"required": true, "type": true, "description": true, "title": true, "format": true,
	"pattern": true, "$comment": true, "$anchor": true, "$dynamicAnchor": true,
	"dependentRequired": true, "contentMediaType": true, "contentEncoding": true,
}

// Check walks schema (a decoded JSON value) and refuses non-local references.
func Check(schema any) error { return check(schema, 0) }

func check(v any, depth int) error {
	if depth > MaxDepth {
		return refusal("schema nesting too deep")
	}
	switch s := v.(type) {
	case bool:
		return nil // true / false schemas
	case map[string]any:
		for k, val := range s {
			if err := keyword(k, val, depth); err != nil {
				return err
			}
		}
		return nil
	default:
		return refusal("a schema must be an object or a boolean")
	}
}

func keyword(k string, val any, depth int) error {
	switch {
	case refKeywords[k]:
		return local(k, val)
	case data[k]:
		return nil
	case single[k]:
		return check(val, depth+1)
	case k == "items":
		// Draft 2020-12: one schema; older drafts: a schema or an array of them.
		if a, ok := val.([]any); ok {
			return each(a, depth)
		}
		return check(val, depth+1)
	case list[k]:
		a, ok := val.([]any)
		if !ok {
			return refusal("a schema list keyword needs an array")
		}
		return each(a, depth)
	case named[k]:
		m, ok := val.(map[string]any)
		if !ok {
			return refusal("a schema map keyword needs an object")
		}
		for _, sub := range m {
			if err := check(sub, depth+1); err != nil {
				return err
			}
		}
		return nil
	case k == "dependencies":
		// Values are schemas or arrays of property names.
		m, ok := val.(map[string]any)
		if !ok {
			return refusal("dependencies needs an object")
		}
		for _, sub := range m {
			if _, names := sub.([]any); names {
				continue
			}
			if err := check(sub, depth+1); err != nil {
				return err
			}
		}
		return nil
	default:
		// Unknown or assertion keywords (minimum, maxLength, x-vendor...).
		// An object value is walked as a schema: a vendor extension that a
		// provider might resolve gets no remote reference either.
		if m, ok := val.(map[string]any); ok {
			return check(m, depth+1)
		}
		return nil
	}
}

func each(a []any, depth int) error {
	for _, sub := range a {
		if err := check(sub, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func local(k string, val any) error {
	if k == "$vocabulary" {
		// An object of vocabulary URIs: every key must be local too.
		m, ok := val.(map[string]any)
		if !ok {
			return refusal("$vocabulary must be an object")
		}
		for uri := range m {
			if !strings.HasPrefix(uri, "#") {
				return refusal("$vocabulary may name only local fragments")
			}
		}
		return nil
	}
	s, ok := val.(string)
	if !ok {
		return refusal(k + " must be a string")
	}
	if !strings.HasPrefix(s, "#") {
		return refusal(k + " may hold only a local fragment")
	}
	return nil
}
