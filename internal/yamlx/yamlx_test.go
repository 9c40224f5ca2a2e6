package yamlx

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

type inner struct {
	Port int    `yaml:"port"`
	Name string `yaml:"name"`
}

type outer struct {
	Items []inner            `yaml:"items"`
	Tags  map[string]string  `yaml:"tags"`
	Sub   *inner             `yaml:"sub"`
	Rest  map[string][]inner `yaml:"rest"`
}

func TestDecodeErrorsNamePaths(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"items: [{port: 1, nme: x}]", `items[0].nme: unknown field "nme" (known fields: name, port)`},
		{"items: {a: b}", "items: expected a list, got a mapping"},
		{"tags: [a]", "tags: expected a mapping, got a list"},
		{"tags: {a: {b: c}}", "tags.a: expected a string, got a mapping"},
		{"sub: {port: 1.5}", `sub.port: expected an integer, got "1.5"`},
		{"sub: {port: x}", `sub.port: expected an integer, got "x"`},
		{"rest: {k: [{port: 2, extra: 1}]}", `rest.k[0].extra: unknown field "extra"`},
		{"sub: 3", `sub: expected a mapping, got "3"`},
		{"items: []\nitems: []", `items: mapping key "items" already defined at line 1`},
	}
	for _, tc := range cases {
		docs, err := Documents([]byte(tc.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		var out outer
		err = Decode(docs[0], &out, "")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestDecodeGood(t *testing.T) {
	docs, err := Documents([]byte("items: [{port: 80, name: web}]\ntags: {a: b}\n---\n---\nsub: {port: 1}\n"))
	if err != nil || len(docs) != 2 {
		t.Fatalf("documents: %v %d", err, len(docs))
	}
	var out outer
	if err := Decode(docs[0], &out, ""); err != nil || out.Items[0].Port != 80 || out.Tags["a"] != "b" {
		t.Errorf("decode: %v %+v", err, out)
	}
	if _, err := Documents([]byte("a: [")); err == nil {
		t.Error("syntax error not reported")
	}
}

// An unexported field is no key: it is neither accepted nor listed among
// the known fields (experiment.Spec's allSkipped was, issue 37).
func TestUnexportedFieldsAreNoKeys(t *testing.T) {
	type withPrivate struct {
		Name    string `yaml:"name"`
		private bool
	}
	_ = withPrivate{}.private
	if got := FieldNames(reflect.TypeOf(withPrivate{})); !slices.Equal(got, []string{"name"}) {
		t.Errorf("FieldNames = %v, want [name]", got)
	}
	docs, err := Documents([]byte("private: true"))
	if err != nil {
		t.Fatal(err)
	}
	var out withPrivate
	if err := Decode(docs[0], &out, ""); err == nil || !strings.Contains(err.Error(), `unknown field "private" (known fields: name)`) {
		t.Errorf("got %v, want private refused and only name known", err)
	}
}

// DecodeAll lists every problem of a document, in document order.
func TestDecodeAllListsEveryProblem(t *testing.T) {
	docs, err := Documents([]byte("items: [{port: x, nme: a}, {extra: 1}]\ntags: [a]\nsub: {port: 1}"))
	if err != nil {
		t.Fatal(err)
	}
	var out outer
	errs := DecodeAll(docs[0], &out, "")
	var got []string
	for _, e := range errs {
		got = append(got, e.Path)
	}
	if want := []string{"items[0].port", "items[0].nme", "items[1].extra", "tags"}; !slices.Equal(got, want) {
		t.Errorf("paths = %v, want %v (%v)", got, want, errs)
	}
	if err := Decode(docs[0], &out, ""); err == nil || err.Error() != errs[0].Error() {
		t.Errorf("Decode = %v, want the first of DecodeAll's, %v", err, errs[0])
	}
}
