package observe

import (
	"net/netip"
	"strings"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Namer completes the flows a source reports: the endpoints behind the
// addresses, and the policy rule that decided, from the rule the kernel
// named (Flow.Origin, a netfilter log prefix's RuleID) or, where the
// kernel names a verdict point and not a rule (an isolated endpoint's
// default deny, nftables' set lookups), from the lab's compiled policy
// for that packet and direction.
type Namer struct {
	Datapath string
	Labels   bool // fill FromLabels and ToLabels
	byIP     map[netip.Addr]*topology.Endpoint
	model    *policy.Model
	origins  map[string]string         // RuleID -> origin
	cluster  map[string]*policy.Policy // cluster policies by Ref
}

// NewNamer builds a namer for a lab, its policy model and compiled
// policy (nil: no policy).
func NewNamer(spec *topology.Spec, m *policy.Model, c *policy.Compiled) *Namer {
	n := &Namer{Datapath: string(spec.Datapath), byIP: map[netip.Addr]*topology.Endpoint{}, model: m,
		origins: map[string]string{}, cluster: map[string]*policy.Policy{}}
	for i := range spec.Endpoints {
		for _, a := range spec.Endpoints[i].Addrs() { // every family's
			n.byIP[a] = &spec.Endpoints[i]
		}
	}
	if c != nil {
		for _, r := range c.Rules {
			n.origins[RuleID(r.Origin)] = r.Origin
		}
		for _, h := range c.HTTP {
			n.origins[RuleID(h.Origin)] = h.Origin
		}
	}
	if m != nil {
		for _, p := range m.Policies {
			if p.Cluster() {
				n.cluster[p.Ref()] = p
			}
		}
	}
	return n
}

// OriginOf maps a log prefix's RuleID back to the origin ("" if unknown).
func (n *Namer) OriginOf(id string) string { return n.origins[id] }

// Endpoint is the endpoint ID of an address, "" if none has it.
func (n *Namer) Endpoint(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	if ep := n.byIP[a]; ep != nil {
		return ep.ID()
	}
	return ""
}

// Name completes f in place.
func (n *Namer) Name(f *Flow) {
	if f.Datapath == "" {
		f.Datapath = n.Datapath
	}
	f.From, f.To = n.Endpoint(f.SrcIP), n.Endpoint(f.DstIP)
	if n.Labels {
		if a, err := netip.ParseAddr(f.SrcIP); err == nil && n.byIP[a] != nil {
			f.FromLabels = n.byIP[a].Labels
		}
		if a, err := netip.ParseAddr(f.DstIP); err == nil && n.byIP[a] != nil {
			f.ToLabels = n.byIP[a].Labels
		}
	}
	if f.Endpoint == "" && f.Direction != "" {
		f.Endpoint = f.To
		if f.Direction == "egress" {
			f.Endpoint = f.From
		}
	}
	if f.Policy != nil {
		return
	}
	if f.Origin != "" {
		f.Policy = n.ref(f.Origin)
		return
	}
	if n.model == nil || f.Direction == "" || !policyReason(f.Reason) {
		return
	}
	f.Policy = n.fromModel(f)
}

// policyReason reports whether a verdict with this reason is a policy's
// (the model names the rule), not a protocol's or a Service's.
func policyReason(r string) bool {
	switch r {
	case ReasonPolicyDenied, ReasonPolicyAllowed, ReasonToProxy:
		return true
	}
	return false
}

// Reasons every source uses for the policy verdicts (a source's other
// reasons are its own: "invalid", "spoofed-source", ...).
const (
	ReasonPolicyDenied  = "policy-denied"  // a deny rule, or an isolated endpoint's default deny
	ReasonPolicyAllowed = "policy-allowed" // an allow rule
	ReasonNotIsolated   = "not-isolated"   // no policy isolates the endpoint in that direction
	ReasonToProxy       = "to-l7-proxy"    // allowed at L3/L4 to an L7 port: handed to the proxy
	ReasonL7Denied      = "l7-denied"      // the L7 proxy answered 403
	ReasonL7Allowed     = "l7-allowed"
	ReasonService       = "service" // a Service's frontend translated to a backend
)

// ref turns an origin into a PolicyRef, with a cluster policy's tier,
// priority and the rule's action.
func (n *Namer) ref(origin string) *PolicyRef {
	p := ParseOrigin(origin)
	if p == nil {
		return nil
	}
	key := p.Name
	if p.Namespace != "" {
		key = p.Namespace + "/" + p.Name
	}
	if cp := n.cluster[p.Kind+" "+key]; cp != nil {
		p.Tier = cp.Tier.String()
		if cp.Kind != policy.KindBaselineNP {
			prio := cp.Priority
			p.Priority = &prio
		}
		p.Action = cp.RuleAction(p.Rule)
	}
	return p
}

// fromModel names the rule the compiled policy says decided f's packet
// in f's direction: the rule, or for a default deny the first policy
// isolating the endpoint, with the direction's path.
func (n *Namer) fromModel(f *Flow) *PolicyRef {
	src, err1 := netip.ParseAddr(f.SrcIP)
	dst, err2 := netip.ParseAddr(f.DstIP)
	if err1 != nil || err2 != nil {
		return nil
	}
	v := n.model.VerdictOf(n.model.AddrParty(src), n.model.AddrParty(dst), f.Protocol, int(f.DstPort))
	side := v.Ingress
	if f.Direction == "egress" {
		side = v.Egress
	}
	if side.Rule != "" && (side.Allowed == (f.Verdict != Dropped)) {
		return n.ref(side.Rule)
	}
	// A drop no rule of the model explains: the default deny of the
	// isolated endpoint, named after the first policy isolating it (also
	// when the model would allow the packet: a datapath that lacks an
	// allow rule drops it there, which is what probe --explain shows).
	if f.Verdict == Dropped && len(side.SelectedBy) > 0 {
		return n.ref(side.SelectedBy[0] + " spec." + f.Direction)
	}
	return nil
}

// Labeled is the set of endpoints of a lab whose labels match a selector
// of "k=v" terms (all must match; "k" alone: the key is present).
func Labeled(spec *topology.Spec, sel []string) map[string]bool {
	out := map[string]bool{}
	for _, ep := range spec.Endpoints {
		ok := true
		for _, term := range sel {
			k, v, hasV := strings.Cut(term, "=")
			got, has := ep.Labels[k]
			if !has || (hasV && got != v) {
				ok = false
				break
			}
		}
		if ok {
			out[ep.ID()] = true
		}
	}
	return out
}
