package kube

import (
	"context"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/k8stest"
	"github.com/cnlab/cnlab/topology"
)

// BenchmarkExec measures what running one command in an agent pod costs
// on the kwok control plane (tools/k8stest), each running `true`:
// Client.Exec in process (exec), and Backend.Exec, as the workloads run
// (command: in process, with the PID file's wrapper and the reaper told).
// With CNLAB_RELAY_BIN naming a cnlab built before commands ran in
// process, it also measures that binary's relay (`cnlab agent exec`, a
// process of its own per command): the path this one replaced, side by
// side. It reports the median and the 10th and 90th percentiles of b.N
// round trips (BENCHMARKS.md).
//
//	CI=true go test -run '^$' -bench Exec -benchtime 50x -count 5 ./kube
func BenchmarkExec(b *testing.B) {
	c := k8stest.Start(b, k8stest.Options{Nodes: 1})
	bin := buildCnlab(b)
	cl, err := Connect(Config{Kubeconfig: c.Kubeconfig})
	if err != nil {
		b.Fatal(err)
	}
	s, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	nodes := map[string]string{}
	for _, ep := range s.Endpoints {
		nodes[ep.ID()] = c.Nodes[0]
	}
	ctx := context.Background()
	d, err := cl.Deploy(ctx, "bench", s, Placement{Nodes: nodes}, "", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Down(ctx, "bench", true)
	p := d.Pods["default/client"]
	report := func(name string, f func() error) {
		var ts []float64
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			ts = append(ts, float64(time.Since(t0).Microseconds())/1000)
		}
		sort.Float64s(ts)
		b.ReportMetric(ts[len(ts)/2], name+"-p50-ms")
		b.ReportMetric(ts[len(ts)/10], name+"-p10-ms")
		b.ReportMetric(ts[len(ts)*9/10], name+"-p90-ms")
	}
	b.ResetTimer()
	report("exec", func() error { return cl.Exec(ctx, p.Namespace, p.Name, []string{"true"}, nil, nil, nil) })
	be := &Backend{C: cl, Run: "bench", Self: bin, dep: d}
	defer be.reap.close()
	report("command", func() error { return be.Exec(ctx, "default/client", []string{"true"}, nil, nil) })
	if old := os.Getenv("CNLAB_RELAY_BIN"); old != "" {
		report("relay", func() error {
			return exec.Command(old, "agent", "exec", "--namespace", p.Namespace, "--pod", p.Name, "--kubeconfig", c.Kubeconfig, "--", "true").Run()
		})
	}
}
