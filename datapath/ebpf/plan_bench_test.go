package ebpf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
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

// clusterPolicies are n Admin-tier policies selecting every pod of the
// lab, policy i denying namespace y's db pods on TCP port first+i in
// both directions (the first of them on port moved instead), and one
// Baseline-tier policy.
func clusterPolicies(n int, moved int) []*policy.Policy {
	var pols []*policy.Policy
	all := &policy.Selector{}
	for i := range n {
		port := 1000 + i
		if i == 0 {
			port = moved
		}
		rule := func(path string) policy.Rule {
			return policy.Rule{Path: path, Action: policy.ActionDeny, Ports: []policy.Port{{Protocol: policy.TCP, Port: port}},
				Peers: []policy.Peer{{Endpoints: &policy.EndpointSel{Namespaces: &policy.Selector{MatchLabels: map[string]string{"ns": "y"}},
					Pods: policy.Selector{MatchLabels: map[string]string{"app": "db"}}}}}}
		}
		pols = append(pols, &policy.Policy{Kind: policy.KindAdminNP, Name: fmt.Sprintf("admin-%d", i), Tier: policy.TierAdmin, Priority: i % 1001,
			Specs: []policy.Spec{{SubjectNamespaces: all, Ingress: policy.Direction{Ordered: []policy.Rule{rule("spec.ingress[0]")}},
				Egress: policy.Direction{Ordered: []policy.Rule{rule("spec.egress[0]")}}}}})
	}
	return append(pols, &policy.Policy{Kind: policy.KindBaselineNP, Name: "default", Tier: policy.TierBaseline,
		Specs: []policy.Spec{{SubjectNamespaces: all, Ingress: policy.Direction{Ordered: []policy.Rule{{Path: "spec.ingress[0]",
			Action: policy.ActionDeny, Peers: []policy.Peer{{Endpoints: &policy.EndpointSel{Namespaces: &policy.Selector{MatchLabels: map[string]string{"ns": "z"}}}}}}}}}}})
}

// ClusterPolicies is clusterPolicies for the benchmarks of package
// ebpf_test (which bring a lab up: package lab imports this one).
var ClusterPolicies = clusterPolicies

// BenchmarkPlanChangeTiers is BenchmarkPlanChange with cluster policies:
// 1,000 Admin-tier policies and a Baseline one selecting every pod of the
// scenario lab, one Admin policy moving to another port (every identity's
// entries are flattened again: they hold cluster-tier entries).
//
//	go test -run '^$' -bench BenchmarkPlanChangeTiers -count 5 ./datapath/ebpf
func BenchmarkPlanChangeTiers(b *testing.B) {
	spec, err := topology.Parse([]byte(scenarios.Lab), "bench", topology.Overrides{Name: "bench-plan", Datapath: "ebpf"})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("admin=%d", n), func(b *testing.B) {
			from, to := compileTiers(b, spec, clusterPolicies(n, 1000)), compileTiers(b, spec, clusterPolicies(n, 990))
			cur := records(b, spec, from)
			b.Run("plan", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if _, err := plan(spec, to); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("change", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if _, ok, err := planChange(spec, from, to, cur); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
			})
		})
	}
}
