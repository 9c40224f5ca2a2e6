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
}

func (w Warning) String() string {
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
