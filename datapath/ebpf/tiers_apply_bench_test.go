package ebpf_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

func compileOn(b *testing.B, spec *topology.Spec, pols []*policy.Policy) *policy.Compiled {
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

// BenchmarkTierApply measures cluster policies on a lab of the eBPF
// datapath (the scenario lab: 9 endpoints on 2 hosts, every one selected
// by every policy): 1,000 Admin-tier policies and one Baseline policy
// applied whole over empty maps (compile-s: compiling them; apply-s: the
// datapath's Apply), and one change with them in place (one Admin policy moves to
// another port; change-s: ApplyChange from the set before until it
// returns; enforce-s: until the first host switched), as
// lab's BenchmarkPolicyScale measures NetworkPolicies.
//
//	go test -run '^$' -bench BenchmarkTierApply -benchtime 1x -count 6 ./datapath/ebpf
func BenchmarkTierApply(b *testing.B) {
	testutil.RequireRoot(b)
	spec, err := topology.Parse([]byte(scenarios.Lab), "bench", topology.Overrides{Name: "bench-tierap", Datapath: "ebpf"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := lab.Up(ctx, spec, lab.UpOptions{}); err != nil {
		b.Fatal(err)
	}
	defer lab.Down(spec.Name, nil)
	d := &ebpf.Datapath{}
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("admin=%d", n), func(b *testing.B) {
			var compile, apply, change, enforce time.Duration
			for i := 0; i < b.N; i++ {
				// Both generations empty: the apply writes every entry.
				for range 2 {
					if err := d.Apply(ctx, spec, compileOn(b, spec, nil)); err != nil {
						b.Fatal(err)
					}
				}
				t0 := time.Now()
				c := compileOn(b, spec, ebpf.ClusterPolicies(n, 1000))
				compile += time.Since(t0)
				t0 = time.Now()
				if err := d.Apply(ctx, spec, c); err != nil {
					b.Fatal(err)
				}
				apply += time.Since(t0)
				c2 := compileOn(b, spec, ebpf.ClusterPolicies(n, 990))
				c3 := compileOn(b, spec, ebpf.ClusterPolicies(n, 980))
				// Both generations hold the set before (records written).
				prev := c
				for _, warm := range []*policy.Compiled{c2, c} {
					if err := d.ApplyChange(ctx, spec, prev, warm); err != nil {
						b.Fatal(err)
					}
					prev = warm
				}
				var inForce time.Time
				fault.SetHook(func(point, host string) error {
					if point == fault.Kernel && inForce.IsZero() {
						inForce = time.Now()
					}
					return nil
				})
				t0 = time.Now()
				err := d.ApplyChange(ctx, spec, c, c3)
				change += time.Since(t0)
				fault.SetHook(nil)
				if err != nil {
					b.Fatal(err)
				}
				if inForce.IsZero() {
					b.Fatal("the datapath never reached fault point kernel")
				}
				enforce += inForce.Sub(t0)
				b.ReportMetric(float64(len(c.Rules)), "rules")
			}
			per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
			b.ReportMetric(per(compile), "compile-s")
			b.ReportMetric(per(apply), "apply-s")
			b.ReportMetric(per(change), "change-s")
			b.ReportMetric(per(enforce), "enforce-s")
		})
	}
}
