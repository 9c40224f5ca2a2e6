package yamlx

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzYAMLXDecode checks that any input is decoded or refused without a
// panic, and that the documents hold at most a few nodes per input byte:
// nothing is expanded (no alias survives Documents), so decoding cannot
// take more than time linear in the input.
func FuzzYAMLXDecode(f *testing.F) {
	f.Add([]byte("items: [{port: 80, name: web}]\ntags: {a: b}\n---\nsub: {port: 1}\n"))
	f.Add([]byte("rest: {k: [{port: 2, name: x}]}\n...\n"))
	f.Add([]byte(billionLaughs(9)))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("sub: &s {port: 1}\nitems: [{<<: *s, name: x}]\n"))
	f.Add([]byte("%YAML 1.2\n---\n- - - -\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := Documents(data)
		if err != nil {
			return
		}
		for _, d := range docs {
			if n, alias := countNodes(d); alias {
				t.Fatal("an alias passed Documents")
			} else if n > 4*len(data)+8 {
				t.Fatalf("%d nodes from %d bytes", n, len(data))
			}
			var out outer
			_ = Decode(d, &out, "")
			type tree map[string][]tree
			var tr tree
			_ = Decode(d, &tr, "")
		}
	})
}

// countNodes counts the nodes under n without following aliases.
func countNodes(n *yaml.Node) (int, bool) {
	count, alias := 1, n.Kind == yaml.AliasNode
	for _, c := range n.Content {
		k, a := countNodes(c)
		count += k
		alias = alias || a
	}
	return count, alias
}
