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
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
)

// readPolicyCounters reads a lab's per-rule counters, summed over its
// hosts and endpoints as `cnlab policy show --counters` shows them
// (lab.SumRules).
type readPolicyCounters func(ctx context.Context) ([]results.PolicyCounter, error)

// policyCounterReader is how to read a lab's per-rule counters: nil when
// it has no datapath or its datapath does not count per rule
// (datapath.RuleCounterer).
func policyCounterReader(spec *topology.Spec) readPolicyCounters {
	if spec.Datapath == "" || spec.Datapath == kind.None {
		return nil
	}
	dp, err := registry.New(spec.Datapath)
	if err != nil {
		return nil
	}
	if _, ok := dp.(datapath.RuleCounterer); !ok {
		return nil
	}
	return func(ctx context.Context) ([]results.PolicyCounter, error) {
		cs, err := lab.RuleCounters(ctx, spec.Name)
		if err != nil {
			return nil, err
		}
		return policyCountersOf(cs), nil
	}
}

// policyCountersOf sums counters per rule (lab.SumRules), sorted by rule
// and verdict.
func policyCountersOf(cs []datapath.RuleCounter) []results.PolicyCounter {
	var out []results.PolicyCounter
	for _, t := range lab.SumRules(cs) {
		out = append(out, results.PolicyCounter{Rule: t.Rule, Verdict: t.Verdict, Packets: t.Packets, Bytes: t.Bytes})
	}
	return sortPolicyCounters(out)
}

func sortPolicyCounters(cs []results.PolicyCounter) []results.PolicyCounter {
	slices.SortFunc(cs, func(x, y results.PolicyCounter) int {
		return cmp.Or(cmp.Compare(x.Rule, y.Rule), cmp.Compare(x.Verdict, y.Verdict))
	})
	return cs
}

// policyCounterKey is a rule and its verdict.
type policyCounterKey struct{ rule, verdict string }

func keyOf(c results.PolicyCounter) policyCounterKey { return policyCounterKey{c.Rule, c.Verdict} }

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
	return sortPolicyCounters(out)
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
