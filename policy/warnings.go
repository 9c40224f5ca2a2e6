package policy

import (
	"fmt"
	"sort"
	"strings"
)

// Warning is a rule the compiler accepted although it matches nothing: a
// named port that no endpoint it is looked up on declares in its ports:
// (for ingress the endpoints the policy selects, for egress the rule's
// destinations). A cluster accepts such a policy too, and the selected
// endpoints stay isolated, so it is not an error; but it is rarely meant.
type Warning struct {
	Policy   string   `json:"policy"` // Kind ns/name
	Path     string   `json:"path"`   // the rule's YAML path, e.g. spec.ingress[0]
	Dir      Dir      `json:"direction"`
	Deny     bool     `json:"deny,omitempty"`
	Port     string   `json:"port"`     // the port's name
	Protocol string   `json:"protocol"` // TCP, UDP, SCTP or ANY
	Selected []string `json:"selected"` // the endpoints the policy selects
	LookedUp []string `json:"lookedUp"` // the endpoints whose ports: were searched
	// Overlap, when set, makes this a warning about cluster policies of
	// one tier and priority that could decide the same connections
	// (the fields above are then empty).
	Overlap *Overlap `json:"overlap,omitempty"`
}

// Overlap is a set of cluster policies of one tier and priority whose
// subjects share endpoints and which have rules in the same direction:
// upstream leaves their order undefined (an implementation may apply any
// of them), cnlab evaluates them by kind, then name (TierOrder).
type Overlap struct {
	Tier     string   `json:"tier"`
	Priority int      `json:"priority"`
	Policies []string `json:"policies"`  // Ref, in the order cnlab evaluates them
	Dirs     []Dir    `json:"direction"` // the directions both have rules in
	Shared   []string `json:"shared"`    // the endpoints more than one of them selects
}

func (w Warning) String() string {
	if o := w.Overlap; o != nil {
		dirs := make([]string, len(o.Dirs))
		for i, d := range o.Dirs {
			dirs[i] = d.String()
		}
		return fmt.Sprintf("%s tier, priority %d: %s can select the same endpoints (%s) with %s rules: their order is undefined upstream; cnlab evaluates them by kind, then name (in this order)",
			o.Tier, o.Priority, list(o.Policies), list(o.Shared), strings.Join(dirs, " and "))
	}
	verb := "allows"
	if w.Deny {
		verb = "denies"
	}
	if w.Dir == Egress {
		return fmt.Sprintf("%s %s: named port %q (%s): none of the rule's destinations (%s) declares it in its ports:, so the rule %s nothing to the endpoints the policy selects (%s)",
			w.Policy, w.Path, w.Port, w.Protocol, list(w.LookedUp), verb, list(w.Selected))
	}
	return fmt.Sprintf("%s %s: named port %q (%s): none of the endpoints the policy selects (%s) declares it in its ports:, so the rule %s nothing",
		w.Policy, w.Path, w.Port, w.Protocol, list(w.Selected), verb)
}

// list joins endpoint IDs, at most 8 of them.
func list(ids []string) string {
	if len(ids) > 8 {
		return strings.Join(ids[:8], ", ") + fmt.Sprintf(" and %d more", len(ids)-8)
	}
	return strings.Join(ids, ", ")
}

// namedRef is one named port of one rule.
type namedRef struct {
	policy, path, port, proto string
	dir                       Dir
	deny                      bool
}

// namedUse is what compiling a named port found, over every subject.
type namedUse struct {
	selected, lookedUp []string
	resolved           bool
}

func (c *Compiled) namedUse(p *Policy, r Rule, dir Dir, deny bool, port Port) *namedUse {
	k := namedRef{policy: p.Ref(), path: r.Path, port: port.Name, proto: port.Protocol, dir: dir, deny: deny}
	u := c.named[k]
	if u == nil {
		u = &namedUse{}
		c.named[k] = u
	}
	return u
}

// namedWarnings lists the named ports that resolved to nothing, in a
// stable order.
func (c *Compiled) namedWarnings() []Warning {
	var ws []Warning
	for k, u := range c.named {
		if u.resolved {
			continue
		}
		ws = append(ws, Warning{Policy: k.policy, Path: k.path, Dir: k.dir, Deny: k.deny, Port: k.port, Protocol: k.proto,
			Selected: uniqSorted(u.selected), LookedUp: uniqSorted(u.lookedUp)})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].String() < ws[j].String() })
	return ws
}

func uniqSorted(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// overlapWarnings finds, in each cluster tier, the policies of one
// priority that could decide the same connection: their subjects select a
// common endpoint of the lab and both have rules in one direction. Such
// policies are grouped (a policy that overlaps two others joins them in
// one warning). The cost is one selection per policy and identity, and
// one comparison per pair of policies of one priority.
func (m *Model) overlapWarnings() []Warning {
	var ws []Warning
	for _, tier := range []struct {
		t    Tier
		pols []*Policy
	}{{TierAdmin, m.admin}, {TierBaseline, m.baseline}} {
		for i := 0; i < len(tier.pols); {
			j := i + 1
			for j < len(tier.pols) && samePriority(tier.pols[i], tier.pols[j]) {
				j++
			}
			if j-i > 1 {
				ws = append(ws, m.overlapsOf(tier.t, tier.pols[i:j])...)
			}
			i = j
		}
	}
	return ws
}

// samePriority says two policies of one tier share a place in its order
// but for their kind and name.
func samePriority(a, b *Policy) bool {
	ap, _, _ := tierSortKey(a)
	bp, _, _ := tierSortKey(b)
	return ap == bp
}

// overlapsOf groups the policies of one tier and priority (in tier order)
// that overlap. Selections are bitsets over the identities, so a pair
// costs one pass over len(Identities)/64 words.
func (m *Model) overlapsOf(t Tier, pols []*Policy) []Warning {
	words := (len(m.Identities) + 63) / 64
	type sel struct {
		ids    []uint64
		in, eg bool
	}
	sels := make([]sel, len(pols))
	for k, p := range pols {
		s := sel{ids: make([]uint64, words)}
		for si := range p.Specs {
			sp := &p.Specs[si]
			s.in = s.in || len(sp.Ingress.Ordered) > 0
			s.eg = s.eg || len(sp.Egress.Ordered) > 0
			for i, id := range m.Identities {
				if m.selects(p, sp, m.endpoint(id.Endpoints[0])) {
					s.ids[i/64] |= 1 << (i % 64)
				}
			}
		}
		sels[k] = s
	}
	parent := make([]int, len(pols)) // union-find over overlapping pairs
	for k := range parent {
		parent[k] = k
	}
	var find func(int) int
	find = func(k int) int {
		if parent[k] != k {
			parent[k] = find(parent[k])
		}
		return parent[k]
	}
	overlaps := false
	for a := range pols {
		for b := a + 1; b < len(pols); b++ {
			sa, sb := &sels[a], &sels[b]
			if !(sa.in && sb.in) && !(sa.eg && sb.eg) || find(a) == find(b) {
				continue
			}
			for w := range sa.ids {
				if sa.ids[w]&sb.ids[w] != 0 {
					parent[find(b)] = find(a)
					overlaps = true
					break
				}
			}
		}
	}
	if !overlaps {
		return nil
	}
	var ws []Warning
	for k := range pols {
		if find(k) != k {
			continue
		}
		var members []int
		for j := range pols {
			if find(j) == k {
				members = append(members, j)
			}
		}
		if len(members) < 2 {
			continue
		}
		// Shared: the identities two members with rules in one
		// direction both select (each such pair overlaps).
		o := &Overlap{Tier: t.String(), Priority: pols[k].Priority}
		in, eg := make([]int, len(m.Identities)), make([]int, len(m.Identities))
		for _, j := range members {
			o.Policies = append(o.Policies, pols[j].Ref())
			for i := range m.Identities {
				if sels[j].ids[i/64]&(1<<(i%64)) != 0 {
					if sels[j].in {
						in[i]++
					}
					if sels[j].eg {
						eg[i]++
					}
				}
			}
		}
		var sharedIn, sharedEg bool
		for i, id := range m.Identities {
			if in[i] > 1 || eg[i] > 1 {
				o.Shared = append(o.Shared, id.Endpoints...)
			}
			sharedIn, sharedEg = sharedIn || in[i] > 1, sharedEg || eg[i] > 1
		}
		if sharedIn {
			o.Dirs = append(o.Dirs, Ingress)
		}
		if sharedEg {
			o.Dirs = append(o.Dirs, Egress)
		}
		sort.Strings(o.Shared)
		ws = append(ws, Warning{Overlap: o})
	}
	return ws
}
