package lab

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// benchPolicies returns n NetworkPolicies, each letting the c pods of every
// namespace reach x/a (app=web) on its own TCP port (10000+2i: never
// adjacent, so no datapath can merge them). Each compiles into 3 IR rules.
// With ranges, policy i allows the two ports 10000+4i and 10000+4i+1 (an
// endPort range, so an interval-set element on nftables).
func benchPolicies(n int, shape string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		first := 10000 + 2*i
		if shape == "ranges" {
			first = 10000 + 4*i
		}
		port := benchPort(shape, first)
		if shape == "cluster" {
			// An Admin-tier policy per port, each its own priority.
			fmt.Fprintf(&b, "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: p%d}\nspec:\n  priority: %d\n  subject: {pods: {namespaceSelector: {matchLabels: {ns: x}}, podSelector: {matchLabels: {app: web}}}}\n  ingress:\n  - action: Allow\n    from:\n    - pods: {namespaceSelector: {}, podSelector: {matchLabels: {pod: c}}}\n    ports: [%s]\n---\n", i, i, port)
			continue
		}
		fmt.Fprintf(&b, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p%d, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector: {matchLabels: {pod: c}}\n    ports: [%s]\n---\n", i, port)
	}
	return b.String()
}

// benchPort is how benchPolicies writes the port (or two-port range)
// starting at first in a policy of the shape.
func benchPort(shape string, first int) string {
	switch shape {
	case "ranges":
		return fmt.Sprintf("{port: %d, endPort: %d}", first, first+1)
	case "cluster":
		return fmt.Sprintf("{portNumber: {protocol: TCP, port: %d}}", first)
	}
	return fmt.Sprintf("{port: %d}", first)
}

// applyChange applies to after from as the lab does: as a change where
// the datapath has ApplyChange (the lab's changeApplier), else whole. The
// same file runs on commits before ApplyChange existed.
func applyChange(ctx context.Context, d datapath.Datapath, spec *topology.Spec, from, to *policy.Compiled) error {
	if ca, ok := d.(interface {
		ApplyChange(context.Context, *topology.Spec, *policy.Compiled, *policy.Compiled) error
	}); ok {
		return ca.ApplyChange(ctx, spec, from, to)
	}
	return d.Apply(ctx, spec, to)
}

func compileFor(b *testing.B, spec *topology.Spec, pols []*policy.Policy) *policy.Compiled {
	m, err := policy.NewModel(spec, pols)
	if err != nil {
		b.Fatal(err)
	}
	c, err := m.Compile()
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkPolicyScale measures, per datapath, shape of policy (single
// ports, port ranges, or one AdminNetworkPolicy per port: "cluster") and
// number of policies:
//
//	compile-s  parsing and compiling the policies (pure Go)
//	apply-s    applying them all to an empty datapath
//	change-s   changing one policy (its port) with all in place, after
//	           two other changes, handed to the datapath as a change
//	           where it takes one (ApplyChange, as the lab does) (the eBPF datapath then edits a
//	           generation in place: it holds the policies of two applies
//	           before)
//	enforce-s  the same change until the new policy is in force on every
//	           host: the netfilter datapaths change host by host, each
//	           then passing fault point "kernel" (the last one counts);
//	           the eBPF datapath switches every host before the first
//	           (that one counts). What follows only readies the next apply.
//	leave-s    the datapath update when an endpoint (z/c), matched as a
//	           peer by every policy, goes away (and the changed policy is
//	           changed back)
//	endpoint-s the datapath update when it appears again
//	clear-s    removing every policy (policy delete --all)
//
// Reproduce with:
//
//	go test -run '^$' -bench PolicyScale -benchtime 1x -count 5 -timeout 60m ./lab
func BenchmarkPolicyScale(b *testing.B) {
	testutil.RequireRoot(b)
	for _, dp := range []string{"iptables", "nftables", "ebpf"} {
		for _, shape := range []string{"ports", "ranges", "cluster"} {
			ns := []int{10, 100, 1000, 10000}
			switch {
			case shape == "cluster":
				ns = []int{10, 100, 1000} // AdminNetworkPolicy priorities go to 1000
			case dp == "ebpf":
				ns = []int{10, 100, 1000, 3334, 10000} // 3334 policies: 10,002 policy map entries
			}
			for _, n := range ns {
				b.Run(fmt.Sprintf("%s/%s/policies=%d", dp, shape, n), func(b *testing.B) {
					spec, err := topology.Parse([]byte(scenarios.Lab), "bench", topology.Overrides{Name: "bench-pol", Datapath: dp})
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					if err := Up(ctx, spec, UpOptions{}); err != nil {
						b.Fatal(err)
					}
					defer Down(spec.Name, nil)
					d, _ := registry.New(kind.Kind(dp))
					// The same lab without z/c, for the endpoint measurement.
					without := *spec
					without.Endpoints = nil
					for _, ep := range spec.Endpoints {
						if ep.ID() != "z/c" {
							without.Endpoints = append(without.Endpoints, ep)
						}
					}
					src := benchPolicies(n, shape)
					var compile, apply, change, enforce, endpoint, leave, clear time.Duration
					for i := 0; i < b.N; i++ {
						t0 := time.Now()
						pols, err := policy.Parse([]byte(src), "bench.yaml")
						if err != nil {
							b.Fatal(err)
						}
						c := compileFor(b, spec, pols)
						compile += time.Since(t0)

						t0 = time.Now()
						if err := d.Apply(ctx, spec, c); err != nil {
							b.Fatal(err)
						}
						apply += time.Since(t0)

						// One policy moves to another port (ports) or range (ranges).
						changed := strings.Replace(src, benchPort(shape, 10000), benchPort(shape, 9990), 1)
						pols2, _ := policy.Parse([]byte(changed), "bench.yaml")
						c2 := compileFor(b, spec, pols2)
						// A third port: the generation edited holds the second.
						third := strings.Replace(src, benchPort(shape, 10000), benchPort(shape, 9980), 1)
						pols3, _ := policy.Parse([]byte(third), "bench.yaml")
						c3 := compileFor(b, spec, pols3)
						prev := c
						for _, warm := range []*policy.Compiled{c2, c} {
							if err := applyChange(ctx, d, spec, prev, warm); err != nil {
								b.Fatal(err)
							}
							prev = warm
						}
						var inForce time.Time
						fault.SetHook(func(point, host string) error {
							if point == fault.Kernel && (inForce.IsZero() || dp != "ebpf") {
								inForce = time.Now()
							}
							return nil
						})
						t0 = time.Now()
						err = applyChange(ctx, d, spec, c, c3)
						change += time.Since(t0)
						fault.SetHook(nil)
						if err != nil {
							b.Fatal(err)
						}
						if inForce.IsZero() {
							b.Fatal("the datapath never reached fault point kernel")
						}
						enforce += inForce.Sub(t0)

						cw := compileFor(b, &without, pols)
						t0 = time.Now()
						if err := d.Apply(ctx, &without, cw); err != nil {
							b.Fatal(err)
						}
						leave += time.Since(t0)
						back := compileFor(b, spec, pols)
						t0 = time.Now()
						if err := d.Apply(ctx, spec, back); err != nil {
							b.Fatal(err)
						}
						endpoint += time.Since(t0)

						empty := compileFor(b, spec, nil)
						t0 = time.Now()
						if err := d.Apply(ctx, spec, empty); err != nil {
							b.Fatal(err)
						}
						clear += time.Since(t0)
						b.ReportMetric(float64(len(c.Rules)), "rules")
					}
					per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
					b.ReportMetric(per(compile), "compile-s")
					b.ReportMetric(per(apply), "apply-s")
					b.ReportMetric(per(change), "change-s")
					b.ReportMetric(per(enforce), "enforce-s")
					b.ReportMetric(per(endpoint), "endpoint-s")
					b.ReportMetric(per(leave), "leave-s")
					b.ReportMetric(per(clear), "clear-s")
				})
			}
		}
	}
}
