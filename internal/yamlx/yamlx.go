// Package yamlx decodes YAML documents strictly: an unknown field is an
// error, and every error names the YAML path of the offending node (for
// example hosts[1].podCIDR) instead of only a line number. It is pure
// logic: no I/O.
package yamlx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is a decoding problem at a YAML path ("" for the document).
type Error struct {
	Path string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Documents parses a YAML stream into its documents' root nodes. Empty
// documents (e.g. a trailing "---") are skipped. An alias (*name) is
// refused: following nested aliases costs time exponential in the size of
// the file (the "billion laughs"), and cnlab's files have no use for them.
func Documents(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, &Error{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		if len(n.Content) == 0 || (n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null") {
			continue
		}
		if err := noAliases(n.Content[0], ""); err != nil {
			return nil, err
		}
		docs = append(docs, n.Content[0])
	}
}

// noAliases returns an error naming the first alias under n. It does not
// follow aliases, so it visits each node of the document once.
func noAliases(n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.AliasNode:
		return &Error{Path: path, Line: n.Line, Msg: fmt.Sprintf("aliases (*%s) are not supported: write the value out", n.Value)}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := join(path, k.Value)
			if err := noAliases(k, p); err != nil {
				return err
			}
			if err := noAliases(n.Content[i+1], p); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := noAliases(c, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Decode decodes node into out (a pointer to a struct) after checking that
// every mapping key exists in the target type. base prefixes the paths in
// errors.
func Decode(node *yaml.Node, out any, base string) error {
	if errs := DecodeAll(node, out, base); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// DecodeAll is Decode returning every problem it finds, in document
// order, as a compiler lists every error of a file: every unknown field
// and value of the wrong kind, or, when there are none, every value the
// decoder refuses. out is filled only when there are none.
func DecodeAll(node *yaml.Node, out any, base string) []*Error {
	var errs []*Error
	checkKnown(node, reflect.TypeOf(out).Elem(), base, &errs)
	if len(errs) > 0 {
		return errs
	}
	if err := node.Decode(out); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			for _, msg := range te.Errors {
				errs = append(errs, explain(msg, node, base))
			}
			return errs
		}
		return []*Error{{Path: base, Msg: err.Error()}}
	}
	return nil
}

// Shaped is a type that decodes itself (UnmarshalYAML) as the struct
// YAMLType, a type made at run time: Decode checks its node against that
// struct, keys, known fields and value kinds, as it checks a field of
// that type.
type Shaped interface{ YAMLType() reflect.Type }

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
var shapedType = reflect.TypeOf((*Shaped)(nil)).Elem()
var nodeType = reflect.TypeOf(yaml.Node{})

func checkKnown(n *yaml.Node, t reflect.Type, path string, errs *[]*Error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(shapedType) {
		t = reflect.Zero(t).Interface().(Shaped).YAMLType()
	}
	if t == nodeType || reflect.PointerTo(t).Implements(unmarshalerType) {
		return
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!int" && n.ShortTag() != "!!null" {
			*errs = append(*errs, &Error{Path: path, Line: n.Line, Msg: fmt.Sprintf("expected an integer, got %q", n.Value)})
			return
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			*errs = append(*errs, &Error{Path: path, Line: n.Line, Msg: fmt.Sprintf("expected a string, got %s", kindName(n))})
			return
		}
		// As the Kubernetes API does: 1, true or 1.5 are not strings
		// (quote them), so "version: 1" fails here as it would there.
		if tag := n.ShortTag(); tag == "!!int" || tag == "!!bool" || tag == "!!float" {
			*errs = append(*errs, &Error{Path: path, Line: n.Line, Msg: fmt.Sprintf("expected a string, got %s %s (quote it: %q)", strings.TrimPrefix(tag, "!!"), n.Value, n.Value)})
			return
		}
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if n.ShortTag() == "!!null" {
				return
			}
			*errs = append(*errs, &Error{Path: path, Line: n.Line, Msg: fmt.Sprintf("expected a mapping, got %s", kindName(n))})
			return
		}
		fields := fieldsOf(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				*errs = append(*errs, &Error{Path: p, Line: k.Line, Msg: fmt.Sprintf("unknown field %q (known fields: %s)", k.Value, strings.Join(FieldNames(t), ", "))})
				continue
			}
			checkKnown(v, ft, p, errs)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if n.ShortTag() == "!!null" {
				return
			}
			*errs = append(*errs, &Error{Path: path, Line: n.Line, Msg: fmt.Sprintf("expected a list, got %s", kindName(n))})
			return
		}
		for i, c := range n.Content {
			checkKnown(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			if n.ShortTag() == "!!null" {
				return
			}
			*errs = append(*errs, &Error{Path: path, Line: n.Line, Msg: fmt.Sprintf("expected a mapping, got %s", kindName(n))})
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkKnown(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), errs)
		}
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

func fieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")
		if tag[0] == "-" || (!f.IsExported() && !f.Anonymous) {
			continue // yaml.v3 never fills an unexported field: not a key
		}
		if len(tag) > 1 && tag[1] == "inline" {
			for k, v := range fieldsOf(f.Type) {
				out[k] = v
			}
			continue
		}
		name := tag[0]
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

// FieldNames lists the YAML keys a struct type accepts, sorted.
func FieldNames(t reflect.Type) []string {
	var out []string
	for k := range fieldsOf(t) {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

var (
	reMismatch = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
	reLine     = regexp.MustCompile(`^line (\d+): (.*)$`)
)

// explain turns yaml.v3's "line N: cannot unmarshal" into a path error by
// finding the value node on that line.
func explain(msg string, root *yaml.Node, base string) *Error {
	m := reMismatch.FindStringSubmatch(msg)
	if m == nil {
		if lm := reLine.FindStringSubmatch(msg); lm != nil {
			line, _ := strconv.Atoi(lm[1])
			if path := findAny(root, base, line); path != "" {
				return &Error{Path: path, Line: line, Msg: lm[2]}
			}
		}
		return &Error{Path: base, Msg: strings.TrimPrefix(msg, "yaml: ")}
	}
	line, _ := strconv.Atoi(m[1])
	path := findValue(root, base, line, "!!"+m[2])
	return &Error{Path: path, Line: line, Msg: fmt.Sprintf("expected %s, got %s %q", goType(m[4]), yamlKind(m[2]), m[3])}
}

func findValue(n *yaml.Node, path string, line int, tag string) string {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if p := findValue(n.Content[i+1], join(path, n.Content[i].Value), line, tag); p != "" {
				return p
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if p := findValue(c, fmt.Sprintf("%s[%d]", path, i), line, tag); p != "" {
				return p
			}
		}
	}
	if n.Line == line && n.Kind != yaml.DocumentNode && n.ShortTag() == tag {
		return path
	}
	return ""
}

// findAny returns the path of the first key or value on a line.
func findAny(n *yaml.Node, path string, line int) string {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			if n.Content[i].Line == line {
				return p
			}
			if q := findAny(n.Content[i+1], p, line); q != "" {
				return q
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if q := findAny(c, fmt.Sprintf("%s[%d]", path, i), line); q != "" {
				return q
			}
		}
	}
	if n.Line == line {
		return path
	}
	return ""
}

func goType(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.Contains(t, "."):
		return "a mapping"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	}
	return t
}

func yamlKind(tag string) string {
	switch tag {
	case "seq":
		return "a list"
	case "map":
		return "a mapping"
	case "str":
		return "the string"
	case "int":
		return "the integer"
	case "float":
		return "the number"
	case "bool":
		return "the boolean"
	}
	return tag
}
