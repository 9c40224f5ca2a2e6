package yamlx

import (
	"fmt"
	"strings"
	"testing"
)

// billionLaughs nests n levels of aliases, each naming the previous anchor
// ten times: following them visits 10^n nodes.
func billionLaughs(n int) string {
	var b strings.Builder
	b.WriteString("a0: &a0 [[], [], [], [], [], [], [], [], [], []]\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestAliasesRefused(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{billionLaughs(9), "a1[0]: aliases (*a0) are not supported"},
		{"items: &i [{port: 1}]\nrest: {k: *i}\n", "rest.k: aliases (*i) are not supported"},
		{"sub: &s {port: 1}\nitems: [{<<: *s, name: x}]\n", "items[0].<<: aliases (*s) are not supported"},
		{"a: 1\n---\nb: [&x 1, *x]\n", "b[1]: aliases (*x) are not supported"},
	}
	for _, tc := range cases {
		_, err := Documents([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestAliasBombDecode decodes the bomb into a struct the way the
// topology, policy and experiment parsers do: it must be refused, not
// expanded.
func TestAliasBombDecode(t *testing.T) {
	type tree []tree
	docs, err := Documents([]byte(billionLaughs(9)))
	if err == nil {
		var out map[string]tree
		err = Decode(docs[0], &out, "")
	}
	if err == nil || !strings.Contains(err.Error(), "aliases") {
		t.Fatalf("got %v, want aliases refused", err)
	}
}
