package ebpf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

// BenchmarkPlan measures plan, the pure Go part of every eBPF apply (from
// the compiled policies to each endpoint's sorted, flattened entries), on
// lab's BenchmarkPolicyScale shapes: n policies, 3 entries each, all in
// x/a's ingress map.
//
//	go test -run '^$' -bench BenchmarkPlan -count 5 ./datapath/ebpf
func BenchmarkPlan(b *testing.B) {
	spec, err := topology.Parse([]byte(scenarios.Lab), "bench", topology.Overrides{Name: "bench-plan", Datapath: "ebpf"})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10, 3334, 10_000} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			var sb strings.Builder
			for i := 0; i < n; i++ {
				fmt.Fprintf(&sb, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p%d, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector: {matchLabels: {pod: c}}\n    ports: [{port: %d}]\n---\n", i, 10000+2*i)
			}
			c := policytest.CompileOn(b, spec, sb.String())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := plan(spec, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPlanChange measures the pure Go part of a policy change
// (planChange: the rules compared, the records patched) on
// BenchmarkPolicyScale's change: one of n policies moves to another port,
// the records those of the set before.
//
//	go test -run '^$' -bench BenchmarkPlanChange -count 5 ./datapath/ebpf
func BenchmarkPlanChange(b *testing.B) {
	spec, err := topology.Parse([]byte(scenarios.Lab), "bench", topology.Overrides{Name: "bench-plan", Datapath: "ebpf"})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{3334} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			src := func(first int) string {
				var sb strings.Builder
				for i := 0; i < n; i++ {
					port := 10000 + 2*i
					if i == 0 {
						port = first
					}
					fmt.Fprintf(&sb, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p%d, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector: {matchLabels: {pod: c}}\n    ports: [{port: %d}]\n---\n", i, port)
				}
				return sb.String()
			}
			from := policytest.CompileOn(b, spec, src(10000))
			to := policytest.CompileOn(b, spec, src(9990))
			cur := records(b, spec, from)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ok, err := planChange(spec, from, to, cur); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
