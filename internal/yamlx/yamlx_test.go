package yamlx

import (
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
