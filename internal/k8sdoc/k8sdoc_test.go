package k8sdoc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/labels"
	"gopkg.in/yaml.v3"
)

// A family of test kinds, with a raw object and a decoder for each, as
// policy and service declare theirs.
var toys = Family{Command: "cnlab toy apply", Noun: "toy", Kinds: []Kind{
	{"toys.example/v1", "Ball"},
	{"toys.example/v2", "Kite"},
	{"v1", "Yoyo"},
}}

type rawToy struct {
	Head `yaml:",inline"`
	Spec yaml.Node `yaml:"spec"`
}

type toy struct {
	kind, ns, name string
	size           int
}

func decodeToy(d *Doc, obj *rawToy) (toy, error) {
	ns, err := d.Metadata(obj.Kind, &obj.Metadata, labels.CheckDNSSubdomain)
	if err != nil {
		return toy{}, err
	}
	var spec struct {
		Size int `yaml:"size"`
	}
	if err := d.Decode(&obj.Spec, &spec, "spec"); err != nil {
		return toy{}, err
	}
	if spec.Size < 0 {
		return toy{}, d.Errorf("spec.size", "%d is negative", spec.Size)
	}
	return toy{obj.Kind, ns, obj.Metadata.Name, spec.Size}, nil
}

func toyReader() *Reader[rawToy, toy] {
	return NewReader(Config[rawToy, toy]{
		Family:     &toys,
		NotMapping: "a toy is a mapping",
		Decoders:   map[string]Decoder[rawToy, toy]{"Ball": decodeToy, "Kite": decodeToy, "Yoyo": decodeToy},
		Refused:    map[string]string{"Marble": "marbles are lost"},
	})
}

const ball = "apiVersion: toys.example/v1\nkind: Ball\nmetadata: {name: red, namespace: x}\nspec: {size: 3}\n"

func TestReadGood(t *testing.T) {
	src := "# a comment\n" + ball + "---\n---\napiVersion: v1\nkind: Yoyo # spins\nmetadata: {name: blue}\n"
	items, err := toyReader().Read([]byte(src), "f.yaml")
	if err != nil || len(items) != 2 {
		t.Fatalf("%d items, %v", len(items), err)
	}
	if v := items[0].Value; v != (toy{"Ball", "x", "red", 3}) {
		t.Errorf("item 0: %+v", v)
	}
	if v := items[1].Value; v != (toy{"Yoyo", DefaultNamespace, "blue", 0}) {
		t.Errorf("item 1: %+v", v)
	}
	o := items[1].Origin
	if o.Source != "f.yaml#2" || o.File != "f.yaml" || o.Index != 2 || o.Ref != "Yoyo default/blue" {
		t.Errorf("origin 1: %+v", o)
	}
	for _, it := range items {
		if strings.Contains(it.Raw, "#") || strings.Contains(it.Raw, "---") {
			t.Errorf("raw keeps comments or separators: %q", it.Raw)
		}
	}
	// The stored text reads back as the same documents.
	again, err := toyReader().Read(Encode(items[0].Raw, items[1].Raw), "stored")
	if err != nil || len(again) != 2 || again[0].Value != items[0].Value || again[1].Raw != items[1].Raw {
		t.Errorf("read back: %+v, %v", again, err)
	}
}

func TestReadBad(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"empty", "---\n", "f.yaml: no toy documents"},
		{"syntax", "kind: [", "f.yaml: "},
		{"alias", "apiVersion: v1\nkind: Yoyo\nmetadata: {name: &n a, namespace: *n}\n", "f.yaml: metadata.namespace: aliases (*n) are not supported: write the value out"},
		{"not a mapping", "- a\n", "f.yaml: document 1: a toy is a mapping"},
		{"list", "apiVersion: v1\nkind: BallList\nitems: []\n", "f.yaml: document 1: kind: BallList is not supported: give its items as separate documents (separated by ---)"},
		{"refused", "kind: Marble\n", "f.yaml: document 1: kind: marbles are lost"},
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", "f.yaml: document 1: kind: is required (Ball, Kite or Yoyo)"},
		{"unknown kind", "apiVersion: v1\nkind: Drum\n", `f.yaml: document 1: kind: "Drum" is not supported (Ball, Kite, Yoyo)`},
		{"kind not a string", "apiVersion: v1\nkind: 5\n", `f.yaml: document 1: kind: expected a string, got int 5 (quote it: "5")`},
		{"unknown field first", "apiVersion: v1\nkind: Drum\nspce: {}\n", `f.yaml: document 1: spce: unknown field "spce" (known fields: apiVersion, kind, metadata, spec, status)`},
		{"apiVersion", "apiVersion: toys.example/v1\nkind: Kite\n", `f.yaml: document 1: apiVersion: "toys.example/v1" is not the apiVersion of Kite (want toys.example/v2)`},
		{"no name", "apiVersion: v1\nkind: Yoyo\nmetadata: {}\n", "f.yaml: document 1: metadata.name: is required"},
		{"bad name", "apiVersion: v1\nkind: Yoyo\nmetadata: {name: Bad_Name, namespace: Bad}\n", `f.yaml: document 1: metadata.name: "Bad_Name" must`},
		{"bad namespace", "apiVersion: v1\nkind: Yoyo\nmetadata: {name: a, namespace: Bad}\n", `f.yaml: document 1: metadata.namespace: "Bad" must`},
		{"bad labels", "apiVersion: v1\nkind: Yoyo\nmetadata: {name: a, labels: {'a b': c}}\n", `f.yaml: document 1: metadata.labels: label key "a b"`},
		{"named", ball + "---\n" + strings.Replace(ball, "size: 3", "size: -1", 1), "f.yaml: document 2 (Ball x/red): spec.size: -1 is negative"},
		{"path in spec", strings.Replace(ball, "size: 3", "size: big", 1), `f.yaml: document 1 (Ball x/red): spec.size: expected an integer, got "big"`},
		{"twice", ball + "---\n" + ball, "f.yaml: document 2 (Ball x/red): metadata.name: Ball x/red is defined twice in this file (also document 1)"},
		{"other family", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n",
			`f.yaml: document 1: kind: "Service" is not supported (Ball, Kite, Yoyo): apply Service documents with cnlab service apply`},
		{"other family, its own fields", "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: c}\nspecs: [{endpointSelector: {}}]\n",
			`f.yaml: document 1: kind: "CiliumNetworkPolicy" is not supported (Ball, Kite, Yoyo): apply CiliumNetworkPolicy documents with cnlab policy apply`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := toyReader().Read([]byte(c.yaml), "f.yaml")
			if err == nil {
				t.Fatalf("accepted, want %q", c.want)
			}
			if !input.Is(err) {
				t.Errorf("%T is not an input.Error", err)
			}
			if !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got  %s\nwant one line starting with %s", err, c.want)
			}
		})
	}
}

// Every kind belongs to one family, and every family's command is its own:
// the message that sends a document elsewhere names one command.
func TestFamiliesAreDisjoint(t *testing.T) {
	owner := map[string]string{}
	commands := map[string]bool{}
	for _, f := range Families() {
		if commands[f.Command] {
			t.Errorf("two families apply with %s", f.Command)
		}
		commands[f.Command] = true
		for _, k := range f.Kinds {
			if o, dup := owner[k.Kind]; dup {
				t.Errorf("%s is a kind of %s and of %s", k.Kind, o, f.Command)
			}
			owner[k.Kind] = f.Command
			if k.APIVersion == "" || strings.HasSuffix(k.Kind, "List") {
				t.Errorf("%+v: a kind needs an apiVersion and cannot end in List", k)
			}
		}
	}
	for _, f := range Families() {
		for _, k := range f.Kinds {
			if o := f.applier(k.Kind); o != nil {
				t.Errorf("%s: its own family sends it to %s", k.Kind, o.Command)
			}
		}
		for _, o := range Families() {
			if o != f && f.applier(o.Kinds[0].Kind) != o {
				t.Errorf("%s does not send %s to %s", f.Command, o.Kinds[0].Kind, o.Command)
			}
		}
	}
}

func TestNewReaderRefusesATableThatIsNotTheFamily(t *testing.T) {
	for _, decoders := range []map[string]Decoder[rawToy, toy]{
		{"Ball": decodeToy, "Kite": decodeToy},
		{"Ball": decodeToy, "Kite": decodeToy, "Yoyo": decodeToy, "Drum": decodeToy},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewReader accepted decoders for %d kinds", len(decoders))
				}
			}()
			NewReader(Config[rawToy, toy]{Family: &toys, Decoders: decoders})
		}()
	}
}

func TestOneOf(t *testing.T) {
	for _, c := range []struct {
		kinds []string
		want  string
	}{{[]string{"A"}, "A"}, {[]string{"A", "B"}, "A or B"}, {[]string{"A", "B", "C"}, "A, B or C"}} {
		f := Family{}
		for _, k := range c.kinds {
			f.Kinds = append(f.Kinds, Kind{"v1", k})
		}
		if got := f.oneOf(); got != c.want {
			t.Errorf("%v: %q, want %q", c.kinds, got, c.want)
		}
	}
}

func TestOnce(t *testing.T) {
	o := Once{}
	if err := o.Add("Ball x/red", "a.yaml#1", "a.yaml"); err != nil {
		t.Fatal(err)
	}
	if err := o.Add("Ball y/red", "b.yaml#1", "b.yaml"); err != nil {
		t.Fatal(err)
	}
	err := o.Add("Ball x/red", "b.yaml#2", "b.yaml")
	if !input.Is(err) || err.Error() != "b.yaml: Ball x/red is also defined in a.yaml#1: give it once" {
		t.Errorf("got %v", err)
	}
}

func TestGivenAndPresent(t *testing.T) {
	var doc struct {
		A, B, C, D, E, F yaml.Node
	}
	if err := yaml.Unmarshal([]byte("a: null\nb: []\nc: ''\nd: [x]\ne: 0\n"), &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		n              *yaml.Node
		given, present bool
	}{{"null", &doc.A, true, false}, {"empty list", &doc.B, true, false}, {"empty string", &doc.C, true, false},
		{"list", &doc.D, true, true}, {"zero", &doc.E, true, true}, {"absent", &doc.F, false, false}} {
		if Given(c.n) != c.given || Present(c.n) != c.present {
			t.Errorf("%s: given %v present %v, want %v %v", c.name, Given(c.n), Present(c.n), c.given, c.present)
		}
	}
}

func ExampleReader() {
	r := toyReader()
	_, err := r.Read([]byte("apiVersion: v1\nkind: EndpointSlice\nmetadata: {name: web-1}\naddressType: IPv4\n"), "toys.yaml")
	fmt.Println(err)
	// Output: toys.yaml: document 1: kind: "EndpointSlice" is not supported (Ball, Kite, Yoyo): apply EndpointSlice documents with cnlab service apply
}

// The stored text of each document is what yaml.Marshal makes of it alone
// (Read encodes a file's documents with one encoder).
func TestRawIsMarshalOfEachDocument(t *testing.T) {
	docs := []string{
		ball,
		"apiVersion: v1\nkind: Yoyo\nmetadata:\n  name: b\n  annotations: {note: \"a: b\\n# c\", long: " + strings.Repeat("word ", 40) + "}\n  labels:\n    k: v # comment\nspec:\n  size: 1\n",
		"apiVersion: toys.example/v2\nkind: Kite\nmetadata:\n  name: c\n  annotations:\n    text: |\n      two\n      lines\nspec: {size: 2}\n...\n",
		"apiVersion: v1\nkind: Yoyo\nmetadata: {name: d, annotations: {e: '', n: ~, q: '---', s: \"--- x\"}}\nspec:\n",
	}
	var src strings.Builder
	for _, d := range docs {
		src.WriteString(d + "---\n")
	}
	items, err := toyReader().Read([]byte(src.String()), "f.yaml")
	if err != nil || len(items) != len(docs) {
		t.Fatalf("%d items, %v", len(items), err)
	}
	for i, d := range docs {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(d), &n); err != nil {
			t.Fatal(err)
		}
		normalize(n.Content[0])
		want, err := yaml.Marshal(n.Content[0])
		if err != nil {
			t.Fatal(err)
		}
		if items[i].Raw != string(want) {
			t.Errorf("document %d stored as\n%s\nwant\n%s", i+1, items[i].Raw, want)
		}
	}
}

// A cluster-scoped kind (as [3/8]'s AdminNetworkPolicy) names itself
// without a namespace.
func TestClusterScopedKind(t *testing.T) {
	skies := Family{Command: "cnlab sky apply", Noun: "sky", Kinds: []Kind{{"v1", "Sky"}}}
	r := NewReader(Config[rawToy, string]{Family: &skies, NotMapping: "a sky is a mapping", Decoders: map[string]Decoder[rawToy, string]{
		"Sky": func(d *Doc, obj *rawToy) (string, error) {
			if obj.Metadata.Namespace != "" {
				return "", d.Errorf("metadata.namespace", "a Sky is cluster-scoped: it has no namespace")
			}
			d.Named("Sky " + obj.Metadata.Name)
			if Given(&obj.Spec) {
				return "", d.Errorf("spec", "a Sky has no spec")
			}
			return obj.Metadata.Name, nil
		},
	}})
	items, err := r.Read([]byte("apiVersion: v1\nkind: Sky\nmetadata: {name: blue}\n---\napiVersion: v1\nkind: Sky\nmetadata: {name: grey}\n"), "f.yaml")
	if err != nil || len(items) != 2 || items[1].Value != "grey" || items[1].Ref != "Sky grey" {
		t.Fatalf("%+v, %v", items, err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"apiVersion: v1\nkind: Sky\nmetadata: {name: a, namespace: x}\n", "f.yaml: document 1: metadata.namespace: a Sky is cluster-scoped: it has no namespace"},
		{"apiVersion: v1\nkind: Sky\nmetadata: {name: a}\nspec: {}\n", "f.yaml: document 1 (Sky a): spec: a Sky has no spec"},
		{"apiVersion: v1\nkind: Sky\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Sky\nmetadata: {name: a}\n", "f.yaml: document 2 (Sky a): metadata.name: Sky a is defined twice in this file (also document 1)"},
		{"apiVersion: v1\nkind: Sky\nmetadata: {name: a}\n---\n" + ball, `f.yaml: document 2: kind: "Ball" is not supported (Sky)`},
		{"apiVersion: v1\nmetadata: {name: a}\n", "f.yaml: document 1: kind: is required (Sky)"},
	} {
		if _, err := r.Read([]byte(c.yaml), "f.yaml"); err == nil || err.Error() != c.want {
			t.Errorf("got  %v\nwant %s", err, c.want)
		}
	}
}

// Every document of a file is checked: two bad documents give two lines,
// the first as a single error would be (issue 37).
func TestReadReportsEveryDocument(t *testing.T) {
	bad := strings.Replace(ball, "size: 3", "size: -1", 1) + "---\napiVersion: v1\nkind: Drum\n---\n" + strings.Replace(ball, "red", "blue", 1)
	_, err := toyReader().Read([]byte(bad), "f.yaml")
	var l input.Errors
	if !errors.As(err, &l) || len(l) != 2 {
		t.Fatalf("got %v (%T), want two problems", err, err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "f.yaml: document 1 (Ball x/red): spec.size: -1 is negative") ||
		!strings.HasPrefix(lines[1], `f.yaml: document 2: kind: "Drum" is not supported`) {
		t.Errorf("got %q", lines)
	}
	if !input.Is(err) {
		t.Error("not bad input")
	}
}
