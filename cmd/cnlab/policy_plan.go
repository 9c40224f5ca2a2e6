package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/datapath/iptables"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/nftables"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// planShown is how many lines of one list policy apply --dry-run prints
// before it says how many more there are.
const planShown = 20

// printApplyPlan writes what policy apply --dry-run found: the policies that
// would be created, updated or left unchanged, the compiled rules that
// would be added and removed, and per host what the datapath would change.
func printApplyPlan(w io.Writer, pl *lab.Plan) error {
	ch := pl.Change
	for _, s := range []struct {
		what  string
		names []string
	}{{"created", ch.Created}, {"updated", ch.Updated}, {"unchanged", ch.Unchanged}} {
		for _, n := range s.names {
			fmt.Fprintf(w, "%s %s (dry run)\n", n, s.what)
		}
	}
	added, removed := entryDiff(pl.Before.Rules, ch.Compiled.Rules)
	fmt.Fprintf(w, "dry run: nothing applied; %s over %s would be enforced (now %s): %s added, %s removed\n",
		plural.N(len(ch.Compiled.Rules), "rule"), plural.N(len(ch.Compiled.Identities), "identity"),
		plural.N(len(pl.Before.Rules), "rule"), plural.N(len(added), "rule"), plural.N(len(removed), "rule"))
	for _, l := range []struct {
		sign string
		c    *policy.Compiled
		es   []policy.Entry
	}{{"+", ch.Compiled, added}, {"-", pl.Before, removed}} {
		for i, r := range l.es {
			if i == planShown {
				fmt.Fprintf(w, "  %s ... and %d more (policy show lists every rule)\n", l.sign, len(l.es)-planShown)
				break
			}
			fmt.Fprintf(w, "  %s %s\n", l.sign, entryLine(l.c, r))
		}
	}
	hosts, err := datapathPlan(pl.Spec, pl.Before, ch.Compiled)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "datapath %s would change:\n", pl.Spec.Datapath)
	for _, h := range pl.Spec.Hosts {
		lines := hosts[h.Name]
		if len(lines) == 0 {
			fmt.Fprintf(w, "  host %s: nothing\n", h.Name)
			continue
		}
		fmt.Fprintf(w, "  host %s:\n", h.Name)
		for i, l := range lines {
			if i == planShown {
				fmt.Fprintf(w, "    ... and %d more\n", len(lines)-planShown)
				break
			}
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	return nil
}

// entryLine renders a compiled rule as policy show's table does, on one
// line: subject, direction, tier, verdict, peer, ports and origin.
func entryLine(c *policy.Compiled, r policy.Entry) string {
	verdict := r.Action()
	if r.Tier != 0 {
		verdict = r.Tier.String() + " " + verdict
	}
	ports := r.PortString()
	if r.L7 {
		ports += " L7"
	}
	return fmt.Sprintf("%s %s %s %s %s  %s", identityString(c, r.Subject), r.Dir, verdict, peerString(c, r), ports, r.Origin)
}

// peerString names a rule's peer: any, its CIDR, or its identity and
// that identity's endpoints.
func peerString(c *policy.Compiled, r policy.Entry) string {
	switch {
	case r.PeerCIDR.IsValid():
		return r.PeerCIDR.String()
	case r.PeerID != 0:
		return identityString(c, r.PeerID)
	}
	return "any"
}

// identityString names an identity by its number and its endpoints.
func identityString(c *policy.Compiled, n uint32) string {
	if id := c.Identity(n); id != nil {
		return fmt.Sprintf("%d (%s)", n, strings.Join(id.Endpoints, ","))
	}
	return fmt.Sprint(n)
}

// entryDiff returns the entries of after that before does not have and
// those of before that after does not have, counting repeats.
func entryDiff(before, after []policy.Entry) (added, removed []policy.Entry) {
	have := map[policy.Entry]int{}
	for _, e := range before {
		have[e]++
	}
	for _, e := range after {
		if have[e] > 0 {
			have[e]--
			continue
		}
		added = append(added, e)
	}
	for _, e := range before {
		if have[e] > 0 {
			have[e]--
			removed = append(removed, e)
		}
	}
	return added, removed
}

// groupKind is what a datapath's rendered state holds lines in: a chain
// of rules, a set of elements, an endpoint's map entries.
type groupKind struct{ noun, unit string }

var (
	chainGroup   = groupKind{"chain", "rule"}
	ipsetGroup   = groupKind{"ipset", "member"}
	nftSetGroup  = groupKind{"set", "element"}
	epMapGroup   = groupKind{"endpoint", "policy map entry"}
	ipcacheGroup = groupKind{"map", "entry"}
)

// group is one named holder of lines in a host's rendered state.
type group struct {
	kind groupKind
	name string
}

// datapathPlan renders the policy before and after with the lab's
// datapath (the pure render each datapath applies from) and says, per
// host, which chains, sets or map entries would change and by how much.
func datapathPlan(spec *topology.Spec, before, after *policy.Compiled) (map[string][]string, error) {
	b, err := renderGroups(spec, before)
	if err != nil {
		return nil, err
	}
	a, err := renderGroups(spec, after)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, h := range spec.Hosts {
		out[h.Name] = groupDiff(b[h.Name], a[h.Name])
	}
	return out, nil
}

// renderGroups is the lab's datapath's rendered state of c, per host.
func renderGroups(spec *topology.Spec, c *policy.Compiled) (map[string]map[group][]string, error) {
	out := map[string]map[group][]string{}
	switch spec.Datapath {
	case kind.EBPF:
		maps, err := ebpf.MapEntries(spec, c)
		if err != nil {
			return nil, err
		}
		for host, gs := range maps {
			out[host] = map[group][]string{}
			for name, lines := range gs {
				k := epMapGroup
				if name == "ipcache" {
					k = ipcacheGroup
				}
				out[host][group{k, name}] = lines
			}
		}
		return out, nil
	case kind.IPTables, kind.NFTables:
	default:
		return nil, fmt.Errorf("datapath %s: no rendered state to compare", spec.Datapath)
	}
	for _, h := range spec.Hosts {
		gs := map[group][]string{}
		if spec.Datapath == kind.IPTables {
			st := iptables.Render(spec, h.Name, c)
			for name, rules := range st.Chains {
				gs[group{chainGroup, name}] = rules
			}
			for name, s := range st.Sets {
				gs[group{ipsetGroup, name}] = s.Members
			}
			if len(st.NAT) > 0 {
				gs[group{chainGroup, "nat CNLAB-L7"}] = st.NAT
			}
		} else {
			st := nftables.Render(spec, h.Name, c)
			for name, elems := range st.Sets {
				gs[group{nftSetGroup, name}] = elems
			}
			if len(st.L7) > 0 {
				gs[group{chainGroup, "l7"}] = st.L7
			}
			if len(st.L7Fwd) > 0 {
				gs[group{chainGroup, "l7fwd"}] = st.L7Fwd
			}
		}
		out[h.Name] = gs
	}
	return out, nil
}

// groupDiff lists the groups whose lines differ, one line each, in
// order of kind and name.
func groupDiff(before, after map[group][]string) []string {
	var names []group
	for g := range before {
		names = append(names, g)
	}
	for g := range after {
		if _, ok := before[g]; !ok {
			names = append(names, g)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		if names[i].kind.noun != names[j].kind.noun {
			return names[i].kind.noun < names[j].kind.noun
		}
		return names[i].name < names[j].name
	})
	var out []string
	for _, g := range names {
		b, hadB := before[g]
		a, hasA := after[g]
		if hadB && hasA && slices.Equal(a, b) {
			continue
		}
		add, rem := lineDiff(b, a)
		what := g.kind.noun + " " + g.name
		switch {
		case !hadB:
			out = append(out, fmt.Sprintf("%s: new, %s", what, plural.N(len(a), g.kind.unit)))
		case !hasA:
			out = append(out, fmt.Sprintf("%s: removed (%s)", what, plural.N(len(b), g.kind.unit)))
		case add == 0 && rem == 0:
			out = append(out, fmt.Sprintf("%s: reordered", what))
		default:
			out = append(out, fmt.Sprintf("%s: +%d -%d %s", what, add, rem, plural.Noun(2, g.kind.unit)))
		}
	}
	return out
}

// lineDiff counts the lines of a that b does not have and those of b that
// a does not have (counting repeats): lists that differ only in their
// order count neither.
func lineDiff(b, a []string) (added, removed int) {
	have := map[string]int{}
	for _, l := range b {
		have[l]++
	}
	for _, l := range a {
		if have[l] > 0 {
			have[l]--
		} else {
			added++
		}
	}
	for _, n := range have {
		removed += n
	}
	return added, removed
}
