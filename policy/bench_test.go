package policy

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseCompile parses and compiles 10,000 NetworkPolicies (the
// shape of lab's BenchmarkPolicyScale) against the scenario lab. Pure Go.
//
//	go test -run '^$' -bench ParseCompile -count 5 ./policy
func BenchmarkParseCompile(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&sb, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p%d, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector: {matchLabels: {pod: c}}\n    ports: [{port: %d}]\n---\n", i, 10000+2*i)
	}
	data := []byte(sb.String())
	lab := scenarioLab(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pols, err := Parse(data, "bench.yaml")
		if err != nil {
			b.Fatal(err)
		}
		m, err := NewModel(lab, pols)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Compile(); err != nil {
			b.Fatal(err)
		}
	}
}
