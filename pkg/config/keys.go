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
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	var errs []error
	walkKeys(doc.Content[0], reflect.TypeOf(Config{}), "", &errs, 0)
	return errs
}

// maxKeyDepth bounds the walk (aliases may nest); Config is 4 levels deep.
const maxKeyDepth = 16

func walkKeys(n *yaml.Node, t reflect.Type, path string, errs *[]error, depth int) {
	if n == nil || depth > maxKeyDepth {
		return
	}
	if n.Kind == yaml.AliasNode {
		walkKeys(n.Alias, t, path, errs, depth+1)
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
				walkKeys(v, t, path, errs, depth+1)
				continue
			}
			name := join(path, k.Value)
			ft, ok := fields[strings.ToLower(k.Value)]
			if !ok {
				*errs = append(*errs, fmt.Errorf("%s: unknown key (line %d): %w", name, k.Line, ErrInvalid))
				continue
			}
			walkKeys(v, ft, name, errs, depth+1)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, e := range n.Content {
			walkKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs, depth+1)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
