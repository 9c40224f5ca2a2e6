package experiment

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/topology"
)

// readPolicyCounters reads a lab's per-rule counters, summed over its hosts.
type readPolicyCounters func(ctx context.Context) ([]results.PolicyCounter, error)

// policyCounterReader is how to read lab's per-rule counters: nil when
// it has no datapath or its datapath does not count per rule
// (datapath.RuleCounterer).
func policyCounterReader(lab *topology.Spec) readPolicyCounters {
	if lab.Datapath == "" || lab.Datapath == kind.None {
		return nil
	}
	dp, err := registry.New(lab.Datapath)
	if err != nil {
		return nil
	}
	rc, ok := dp.(datapath.RuleCounterer)
	if !ok {
		return nil
	}
	return func(ctx context.Context) ([]results.PolicyCounter, error) {
		cs, err := rc.RuleCounters(ctx, lab)
		if err != nil {
			return nil, err
		}
		return sumPolicyCounters(cs), nil
	}
}

// policyCounterKey is a rule without its host.
type policyCounterKey struct{ endpoint, direction, rule, verdict string }

func keyOf(c results.PolicyCounter) policyCounterKey {
	return policyCounterKey{c.Endpoint, c.Direction, c.Rule, c.Verdict}
}

// sumPolicyCounters sums each rule's counters over the hosts, sorted by
// endpoint, direction, rule and verdict.
func sumPolicyCounters(cs []datapath.RuleCounter) []results.PolicyCounter {
	out := make([]results.PolicyCounter, 0, len(cs))
	for _, c := range cs {
		out = append(out, results.PolicyCounter{Endpoint: c.Endpoint, Direction: c.Direction, Rule: c.Rule, Verdict: c.Verdict, Packets: c.Packets, Bytes: c.Bytes})
	}
	return addPolicyCounters(nil, out)
}

// addPolicyCounters adds b to a rule by rule (rules of b that a lacks are
// added), sorted.
func addPolicyCounters(a, b []results.PolicyCounter) []results.PolicyCounter {
	by := map[policyCounterKey]int{}
	out := slices.Clone(a)
	for i, c := range out {
		by[keyOf(c)] = i
	}
	for _, c := range b {
		if i, ok := by[keyOf(c)]; ok {
			out[i].Packets += c.Packets
			out[i].Bytes += c.Bytes
			continue
		}
		by[keyOf(c)] = len(out)
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y results.PolicyCounter) int {
		return cmp.Or(cmp.Compare(x.Endpoint, y.Endpoint), cmp.Compare(x.Direction, y.Direction),
			cmp.Compare(x.Rule, y.Rule), cmp.Compare(x.Verdict, y.Verdict))
	})
	return out
}

// policyCounterDelta is what each rule counted between two readings: a
// rule whose counters went down (its policies were applied again) counts
// from zero, a rule new in after counts all it has.
func policyCounterDelta(before, after []results.PolicyCounter) []results.PolicyCounter {
	prev := map[policyCounterKey]results.PolicyCounter{}
	for _, c := range before {
		prev[keyOf(c)] = c
	}
	out := make([]results.PolicyCounter, 0, len(after))
	for _, c := range after {
		if b, ok := prev[keyOf(c)]; ok && b.Packets <= c.Packets && b.Bytes <= c.Bytes {
			c.Packets -= b.Packets
			c.Bytes -= b.Bytes
		}
		out = append(out, c)
	}
	return out
}

// countPolicies runs sample between two readings of the lab's per-rule
// counters and adds what they counted to the point's; a reading that
// fails is logged and the point goes on without counters for the sample.
func countPolicies(ctx context.Context, read readPolicyCounters, pr *results.PointResult, log io.Writer, sample func() error) error {
	if read == nil {
		return sample()
	}
	before, berr := read(ctx)
	if berr != nil {
		fmt.Fprintf(log, "policy counters before the sample: %v\n", berr)
	}
	if err := sample(); err != nil {
		return err
	}
	after, aerr := read(ctx)
	if aerr != nil {
		fmt.Fprintf(log, "policy counters after the sample: %v\n", aerr)
	}
	if berr == nil && aerr == nil {
		pr.PolicyCounters = addPolicyCounters(pr.PolicyCounters, policyCounterDelta(before, after))
	}
	return nil
}
