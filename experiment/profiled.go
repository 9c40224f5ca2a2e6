package experiment

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/profile"
	"github.com/cnlab/cnlab/topology"
)

// profiled runs a point once more under perf: its samples are kept apart
// (profiling costs CPU, so they are not mixed with the measured ones),
// with iptables rule counters of every namespace that has rules.
func (ru *runner) profiled(ctx context.Context, pr *results.PointResult, e sampleEnv, logName string) error {
	res := &results.ProfileResult{Log: logName}
	pr.Prof = res
	p, err := profile.Start(ctx, profile.Options{Dir: filepath.Join(ru.o.Out, "profiles", pr.ID)})
	if err != nil {
		res.Error = err.Error()
		return nil // a profile that cannot run does not fail the point
	}
	counters := func() map[string][]results.RuleCounter {
		if e.counters == nil {
			return nil
		}
		return e.counters(ctx, pr.Params, e.log)
	}
	before := counters()
	m, werr := runSample(ctx, pr.Workload, e)
	kres, perr := p.Stop()
	res.Metrics, res.Kernel = m, kres
	switch {
	case werr != nil:
		res.Error = werr.Error()
	case perr != nil:
		res.Error = perr.Error()
	}
	if before != nil {
		res.IPTables = map[string][]results.RuleCounter{}
		for ns, after := range counters() {
			res.IPTables[ns] = counterDelta(before[ns], after)
		}
	}
	return nil
}

// labCounters reads the iptables rule counters of every namespace of
// lab that has rules (hosts with the iptables datapath, chain hops with a
// firewall); nil when there are none.
func labCounters(ctx context.Context, lab *topology.Spec, p results.Params, log io.Writer) map[string][]results.RuleCounter {
	if p.Datapath != kind.IPTables && p.FirewallRules == 0 {
		return nil
	}
	var nss []string
	for _, h := range lab.Hosts {
		nss = append(nss, h.Netns)
	}
	if c := lab.Chain; c != nil {
		// The firewall is in every namespace of the chain, the ends too.
		nss = append(nss, c.Segments[0].LeftNetns)
		for _, n := range c.Nodes {
			nss = append(nss, n.Netns)
		}
		nss = append(nss, c.Segments[len(c.Segments)-1].RightNetns)
	}
	out := map[string][]results.RuleCounter{}
	for _, ns := range nss {
		rc, err := profile.IPTablesCounters(ctx, ns, profile.SaveBinary(lab.IPTables.Backend))
		if err != nil {
			fmt.Fprintf(log, "iptables counters of %s: %v\n", ns, err)
			continue
		}
		out[ns] = rc
	}
	return out
}

// counterDelta is what each rule matched between two readings of the
// same rules (the later reading as is if the rules changed).
func counterDelta(before, after []results.RuleCounter) []results.RuleCounter {
	out := append([]results.RuleCounter(nil), after...)
	if len(before) != len(after) {
		return out
	}
	for i := range out {
		b := before[i]
		if b.Table != out[i].Table || b.Chain != out[i].Chain || b.Rule != out[i].Rule {
			return append([]results.RuleCounter(nil), after...)
		}
		out[i].Packets -= min(b.Packets, out[i].Packets)
		out[i].Bytes -= min(b.Bytes, out[i].Bytes)
	}
	return out
}
