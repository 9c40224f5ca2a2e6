package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Matrix holds the values of every swept parameter: a list per axis (an
// axis without values keeps its default). It names no axis itself: its
// keys are Axes' and its lists' types Params' (a point's value of the
// axis), so an axis is declared by its Params field and its row of Axes.
// The zero Matrix sets nothing; a Matrix is a value (Set and Override
// never change a copy).
type Matrix struct {
	lists map[string]any // axis key → a non-empty []int, []string or []bool
}

// matrixType is the matrix in YAML and JSON: a struct with a list field
// per axis, in Axes' order, tagged with its key (json: omitempty). The
// file formats are those of the struct that spelled the axes one by one.
var matrixType = func() reflect.Type {
	fs := make([]reflect.StructField, len(Axes))
	for i, a := range Axes {
		fs[i] = reflect.StructField{
			Name: strings.ToUpper(a.Key[:1]) + a.Key[1:],
			Type: a.list,
			Tag:  reflect.StructTag(fmt.Sprintf(`yaml:%q json:"%s,omitempty"`, a.Key, a.Key)),
		}
	}
	return reflect.StructOf(fs)
}()

// listType is the matrix's list for a Params field: of its basic type
// (datapath's kind.Kind is a []string in the file).
func listType(t reflect.Type) reflect.Type {
	switch t.Kind() {
	case reflect.Int:
		return reflect.TypeFor[[]int]()
	case reflect.String:
		return reflect.TypeFor[[]string]()
	case reflect.Bool:
		return reflect.TypeFor[[]bool]()
	}
	panic(fmt.Sprintf("results: a Params field of type %s cannot be an axis (int, string or bool)", t))
}

// Set gives axis key the values list, a []int, []string or []bool as
// the axis's Params field is (empty or nil: the axis keeps its default).
// A key that is no axis or a list of another type is a programming error.
func (m *Matrix) Set(key string, list any) {
	a := AxisOf(key)
	if a == nil {
		panic(fmt.Sprintf("results: %q is not a matrix axis", key))
	}
	v := reflect.ValueOf(list)
	if list != nil && v.Type() != a.list {
		panic(fmt.Sprintf("results: matrix %s takes %s, not %T", key, a.list, list))
	}
	lists := maps.Clone(m.lists)
	if list == nil || v.Len() == 0 {
		delete(lists, key)
	} else {
		if lists == nil {
			lists = map[string]any{}
		}
		lists[key] = list
	}
	if len(lists) == 0 {
		lists = nil
	}
	m.lists = lists
}

// list is the axis's values (an invalid Value: none).
func (m Matrix) list(a *Axis) reflect.Value { return reflect.ValueOf(m.lists[a.Key]) }

// shape is the matrix as a matrixType.
func (m Matrix) shape() reflect.Value {
	v := reflect.New(matrixType).Elem()
	for i := range Axes {
		if l := m.list(&Axes[i]); l.IsValid() {
			v.Field(i).Set(l)
		}
	}
	return v
}

// matrixOf is the matrix of a matrixType.
func matrixOf(v reflect.Value) Matrix {
	var m Matrix
	for i := range Axes {
		m.Set(Axes[i].Key, v.Field(i).Interface())
	}
	return m
}

// YAMLType is the struct yamlx checks a matrix's keys and values against.
func (Matrix) YAMLType() reflect.Type { return matrixType }

// UnmarshalYAML decodes a matrix as its struct: yaml's type errors (with
// their lines, from which yamlx finds the YAML path) are those of a field.
func (m *Matrix) UnmarshalYAML(n *yaml.Node) error {
	v := reflect.New(matrixType)
	err := n.Decode(v.Interface())
	*m = matrixOf(v.Elem())
	return err
}

// MarshalJSON writes the matrix as its struct: the keys in Axes' order,
// the unset left out.
func (m Matrix) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false) // the enclosing encoder's choice applies
	err := e.Encode(m.shape().Interface())
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
}

// UnmarshalJSON reads what MarshalJSON wrote. A value of the wrong type
// is the error of a field of the enclosing struct (which
// encoding/json names: Spec, Sweep, Quick) at the same path.
func (m *Matrix) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	v := reflect.New(matrixType)
	err := json.Unmarshal(b, v.Interface())
	if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) && te.Type == matrixType {
		te.Type = reflect.TypeFor[Matrix]() // not the made struct
	}
	*m = matrixOf(v.Elem())
	return err
}
