package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Load reads and resolves a topology file.
func Load(path string, ov Overrides) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &InputError{File: path, Msg: fmt.Sprintf("cannot read: %v", err)}
	}
	return Parse(data, path, ov)
}

// Overrides replace fields of the file from the command line (--name,
// --datapath). Empty fields change nothing.
type Overrides struct {
	Name     string
	Datapath string
}

// Parse decodes a topology document strictly and resolves it. file is used
// in error messages only.
func Parse(data []byte, file string, ov Overrides) (*Spec, error) {
	raw, err := decodeStrict(data, file)
	if err != nil {
		return nil, err
	}
	return resolve(raw, file, ov)
}

// decodeStrict decodes YAML into a rawFile, rejecting unknown fields, and
// turns yaml.v3's line-numbered errors into errors naming the YAML path.
func decodeStrict(data []byte, file string) (*rawFile, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &InputError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(root.Content) == 0 {
		return nil, &InputError{File: file, Msg: "empty topology document"}
	}
	if root.Content[0].Kind != yaml.MappingNode {
		return nil, &InputError{File: file, Msg: "a topology must be a mapping (name:, hosts:, endpoints:, ...)"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawFile
	err := dec.Decode(&raw)
	if err == nil {
		var extra yaml.Node
		if dec.Decode(&extra) != io.EOF {
			return nil, &InputError{File: file, Msg: "more than one YAML document: a topology file holds exactly one"}
		}
		return &raw, nil
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return nil, &InputError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	idx := indexNodes(root.Content[0])
	return nil, explainTypeError(te.Errors[0], idx, file)
}

var (
	reUnknown  = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (\S+)$`)
	reMismatch = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
)

func explainTypeError(msg string, idx nodeIndex, file string) error {
	if m := reUnknown.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		path := idx.find(line, m[2], true)
		known := knownFields(m[3])
		return &InputError{File: file, Path: path,
			Msg: fmt.Sprintf("unknown field %q (known fields: %s)", m[2], strings.Join(known, ", "))}
	}
	if m := reMismatch.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		path := idx.find(line, "", false)
		return &InputError{File: file, Path: path,
			Msg: fmt.Sprintf("expected %s, got %s %q", describeGoType(m[4]), yamlKind(m[2]), m[3])}
	}
	return &InputError{File: file, Msg: msg}
}

func describeGoType(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "topology.raw"):
		return "a mapping"
	case strings.HasPrefix(t, "int"):
		return "an integer"
	case t == "string":
		return "a string"
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

// knownFields lists the YAML keys of one of the raw types, by the type name
// yaml.v3 prints (e.g. "topology.rawHost").
func knownFields(typeName string) []string {
	types := []any{rawFile{}, rawHost{}, rawLink{}, rawNamespace{}, rawEndpoint{}, rawPort{}, rawChain{}}
	for _, v := range types {
		t := reflect.TypeOf(v)
		if t.String() != typeName {
			continue
		}
		var out []string
		for i := 0; i < t.NumField(); i++ {
			if tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; tag != "" {
				out = append(out, tag)
			}
		}
		sort.Strings(out)
		return out
	}
	return nil
}

// nodeRef records where a node is in the file and its YAML path.
type nodeRef struct {
	line  int
	key   bool
	value string
	path  string
}

type nodeIndex []nodeRef

func indexNodes(n *yaml.Node) nodeIndex {
	var out nodeIndex
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			out = append(out, nodeRef{line: n.Line, path: path})
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := joinPath(path, k.Value)
				out = append(out, nodeRef{line: k.Line, key: true, value: k.Value, path: p})
				walk(v, p)
			}
		case yaml.SequenceNode:
			out = append(out, nodeRef{line: n.Line, path: path})
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		default:
			out = append(out, nodeRef{line: n.Line, value: n.Value, path: path})
		}
	}
	walk(n, "")
	return out
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// find returns the path of the first key (key=true, matching value) or of
// the first value node (key=false) on the given line.
func (idx nodeIndex) find(line int, value string, key bool) string {
	for _, r := range idx {
		if r.line != line || r.key != key {
			continue
		}
		if key && r.value != value {
			continue
		}
		return r.path
	}
	return fmt.Sprintf("line %d", line)
}
