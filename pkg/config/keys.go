package config

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// unknownKeys walks the YAML document itself and returns one error per
// mapping key that names no field of Config, matched without regard to case
// as viper matches. viper lowercases every key it reads, so its own refusal
// cannot show the key as the operator wrote it; this one names the path as
// written and its line. Input that is not YAML yields nothing: viper reports
// that.
func unknownKeys(data []byte) []error {
	errs, _ := scanKeys(data)
	return errs
}

// writtenKey is a known key's path as written in the file, and its line.
type writtenKey struct {
	path string
	line int
}

// scanKeys walks the document once: the unknown keys, and every known key's
// written path by its lowercased path (to name keys in decoder errors).
func scanKeys(data []byte) ([]error, map[string]writtenKey) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil, nil
	}
	w := &keyWalk{written: map[string]writtenKey{}}
	w.walk(doc.Content[0], reflect.TypeOf(Config{}), "", 0)
	return w.errs, w.written
}

type keyWalk struct {
	errs    []error
	written map[string]writtenKey
}

// maxKeyDepth bounds the walk (aliases may nest); Config is 4 levels deep.
const maxKeyDepth = 16

func (w *keyWalk) walk(n *yaml.Node, t reflect.Type, path string, depth int) {
	if n == nil || depth > maxKeyDepth {
		return
	}
	if n.Kind == yaml.AliasNode {
		w.walk(n.Alias, t, path, depth+1)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // a type error: the decoder names it
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if tag, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ","); tag != "" && tag != "-" {
				fields[strings.ToLower(tag)] = f.Type
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" { // "<<: *defaults" merges the aliased mapping here
				w.walk(v, t, path, depth+1)
				continue
			}
			name := join(path, k.Value)
			ft, ok := fields[strings.ToLower(k.Value)]
			if !ok {
				w.errs = append(w.errs, fmt.Errorf("%s: unknown key (line %d): %w", name, k.Line, ErrInvalid))
				continue
			}
			w.written[strings.ToLower(name)] = writtenKey{name, k.Line}
			w.walk(v, ft, name, depth+1)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, e := range n.Content {
			w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
