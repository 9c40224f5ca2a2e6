package experiment

import (
	"context"
	"errors"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/l7proxy/deploy"
	"github.com/cnlab/cnlab/l7proxy/haproxy"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// startHAProxy puts HAProxy in the place of cnlab's proxy on every host of
// the lab whose endpoints have an L7 port under c (an l7Proxy haproxy
// point's lab: docs/l7.md, "HAProxy as the reference"), with the rules
// deploy.Build gives that host's proxy. On the eBPF datapath what it
// sends is marked as the proxy's (haproxy.Table). On an error every
// HAProxy of the lab is stopped.
func startHAProxy(ctx context.Context, spec *topology.Spec, c *policy.Compiled) error {
	mark := spec.Datapath == kind.EBPF
	for _, h := range spec.Hosts {
		cfg := deploy.Build(spec, h.Name, c)
		if cfg == nil {
			continue
		}
		if _, err := haproxy.Start(ctx, spec, h.Name, cfg, mark); err != nil {
			return errors.Join(err, haproxy.StopAll(context.WithoutCancel(ctx), spec))
		}
	}
	return nil
}

// haproxyCPU is the CPU time the lab's HAProxy processes used so far (-1
// when none runs): an l7Proxy haproxy point's proxy CPU.
func haproxyCPU(labName string) time.Duration {
	pids := haproxy.PidsByName(labName)
	if len(pids) == 0 {
		return -1
	}
	var total time.Duration
	for _, pid := range pids {
		t, err := procCPU(pid)
		if err != nil {
			return -1
		}
		total += t
	}
	return total
}
