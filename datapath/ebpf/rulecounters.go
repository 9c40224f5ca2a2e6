package ebpf

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// ruleVerdicts names enum rule_verdict as datapath.RuleCounter does.
var ruleVerdicts = map[cnlabRuleVerdict]string{
	cnlabRuleVerdictRV_ALLOW: "allow",
	cnlabRuleVerdictRV_DENY:  "deny",
	cnlabRuleVerdictRV_PASS:  "pass",
}

// RuleCounters implements datapath.RuleCounterer: RuleCountersOf with the
// rules of the policies last applied, named by the file Apply leaves
// beside its state (ruleNamesPath); a rule it does not name (none applied
// since, or no longer applied) is named by its reference ("rule %08x",
// RuleRef of its origin).
func (d *Datapath) RuleCounters(ctx context.Context, lab *topology.Spec) ([]datapath.RuleCounter, error) {
	var f ruleNamesFile
	_ = files.ReadJSON(ruleNamesPath(lab.Name), &f)
	return ruleCounters(lab, f.Rules)
}

// ruleNamesPath is where Apply leaves the origins of the rules it
// applied, by RuleRef, for RuleCounters (the programs count by reference).
func ruleNamesPath(lab string) string {
	return filepath.Join(rundir.Lab(lab), "datapath", "ebpf-rules.json")
}

type ruleNamesFile struct {
	Set   string            `json:"set"` // first: saveRuleNames reads it alone
	Rules map[uint32]string `json:"rules"`
}

// saveRuleNames writes ruleNamesPath for the compiled set c, unless it
// names that set already.
func saveRuleNames(lab string, c *policy.Compiled) error {
	path := ruleNamesPath(lab)
	head := fmt.Sprintf(`{"set":%q`, c.Set)
	if f, err := os.Open(path); err == nil {
		buf := make([]byte, len(head))
		n, _ := io.ReadFull(f, buf)
		f.Close()
		if c.Set != "" && string(buf[:n]) == head {
			return nil
		}
	}
	names := ruleNamesFile{Set: c.Set, Rules: make(map[uint32]string, len(c.Rules))}
	for _, r := range c.Rules {
		names.Rules[RuleRef(r.Origin)] = r.Origin
	}
	return files.WriteJSON(path, names, false)
}

// RuleCountersOf returns, per host, endpoint, direction, rule and
// verdict, the packets and bytes a policy rule decided (cnlab_rule_counters:
// a new flow's first packet it allowed, a packet it denied, or that an
// Admin Pass handed to a default), with the rule named by its origin in
// rules (the lab's compiled rules), and per isolated endpoint and
// direction the default deny's drops (cnlab_counters' policy-default-deny)
// as datapath.DefaultDenyRule. Counters are the hosts' since setup: they
// survive applies (a rule no longer in rules keeps its reference's name).
func RuleCountersOf(ctx context.Context, lab *topology.Spec, rules []policy.Entry) ([]datapath.RuleCounter, error) {
	names := map[uint32]string{}
	for _, r := range rules {
		names[RuleRef(r.Origin)] = r.Origin
	}
	return ruleCounters(lab, names)
}

func ruleCounters(lab *topology.Spec, names map[uint32]string) ([]datapath.RuleCounter, error) {
	var out []datapath.RuleCounter
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		cs, err := hostRuleCounters(lab, h, names)
		if err != nil {
			return nil, fmt.Errorf("host %s: %w", h.Name, err)
		}
		out = append(out, cs...)
	}
	return out, nil
}

func hostRuleCounters(lab *topology.Spec, h *topology.Host, names map[uint32]string) ([]datapath.RuleCounter, error) {
	m, err := openHost(lab.Name, h.Name)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	// A lab set up before cnlab_rule_counters existed has its default
	// denies only.
	_ = m.open(h.Name, mapRuleCounters)
	cfg, err := m.readConfig()
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, ep := range change.LocalEndpoints(lab, h.Name) {
		eps = append(eps, ep.ID())
	}
	epName := func(slot uint32) string {
		if int(slot) < len(eps) {
			return eps[slot]
		}
		return fmt.Sprintf("slot-%d", slot)
	}
	// Both generations' slots of an endpoint count into one row.
	type row struct {
		ep, dir, rule, verdict string
	}
	sums := map[row]*datapath.RuleCounter{}
	add := func(r row, packets, bytes uint64) {
		c := sums[r]
		if c == nil {
			c = &datapath.RuleCounter{Host: h.Name, Endpoint: r.ep, Direction: r.dir, Rule: r.rule, Verdict: r.verdict}
			sums[r] = c
		}
		c.Packets += packets
		c.Bytes += bytes
	}
	if m.ruleCounters != nil {
		if err := readRuleCounters(m, names, cfg.MaxEp, func(slot uint32, dir, rule, verdict string, packets, bytes uint64) {
			add(row{epName(slot), dir, rule, verdict}, packets, bytes)
		}); err != nil {
			return nil, err
		}
	}
	counters, err := readCounters(m, cfg.MaxEp)
	if err != nil {
		return nil, err
	}
	for slot, cs := range counters {
		for _, c := range cs {
			if c.reason == cnlabReasonR_DROP_DEFAULT {
				add(row{epName(slot), policy.Dir(c.dir).String(), datapath.DefaultDenyRule, datapath.DefaultDenyRule}, c.packets, c.bytes)
			}
		}
	}
	out := make([]datapath.RuleCounter, 0, len(sums))
	for _, c := range sums {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Endpoint != b.Endpoint {
			return a.Endpoint < b.Endpoint
		}
		if a.Direction != b.Direction {
			return a.Direction < b.Direction
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Verdict < b.Verdict
	})
	return out, nil
}

// readRuleCounters sums cnlab_rule_counters over CPUs and hands each
// counted key to fn: the endpoint's index (its slot in either
// generation), the direction, the rule (by origin where names has it)
// and the verdict.
func readRuleCounters(m *hostMaps, names map[uint32]string, maxEp uint32, fn func(slot uint32, dir, rule, verdict string, packets, bytes uint64)) error {
	var k cnlabRuleKey
	var per []cnlabCounter
	it := m.ruleCounters.Iterate()
	for it.Next(&k, &per) {
		var packets, bytes uint64
		for _, p := range per {
			packets += p.Packets
			bytes += p.Bytes
		}
		if packets == 0 {
			continue
		}
		rule, ok := names[k.Rule]
		if !ok {
			rule = fmt.Sprintf("rule %08x", k.Rule)
		}
		verdict, ok := ruleVerdicts[cnlabRuleVerdict(k.Verdict)]
		if !ok {
			verdict = fmt.Sprint(k.Verdict)
		}
		slot := k.Slot
		if maxEp > 0 {
			slot %= maxEp
		}
		fn(slot, policy.Dir(k.Dir).String(), rule, verdict, packets, bytes)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", mapRuleCounters, err)
	}
	return nil
}
