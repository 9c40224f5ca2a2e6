package policytest

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Target is a protocol and destination port a differential test sends,
// over one address family.
type Target struct {
	Proto uint8
	Port  uint16
	// Family is the address family of the connection, 4 or 6; 0: the
	// endpoints' primary addresses (topology.Endpoint.IP). Addrs gives
	// the addresses.
	Family int
}

// Addrs are the source's and destination's addresses of the target's
// family (their primary ones for Family 0).
func Addrs(src, dst *topology.Endpoint, tg Target) (netip.Addr, netip.Addr) {
	if tg.Family == 0 {
		return src.IP, dst.IP
	}
	s, _ := src.Addr(tg.Family)
	d, _ := dst.Addr(tg.Family)
	return s, d
}

// ForFamilies returns the targets once per family of the lab when it has
// more than one (Family set, ICMP's protocol number the family's), and
// as they are (Family 0, the primary addresses) on a single-family lab.
func ForFamilies(lab *topology.Spec, targets []Target) []Target {
	fams := lab.Families()
	if len(fams) < 2 {
		return targets
	}
	var out []Target
	for _, fam := range fams {
		for _, tg := range targets {
			tg.Family = fam
			if tg.Proto == policy.ProtoICMP || tg.Proto == policy.ProtoICMPv6 {
				tg.Proto = policy.ProtoICMPOf(fam)
			}
			out = append(out, tg)
		}
	}
	return out
}

// Targets are TCP and UDP on each port, then SCTP on port 80 and the
// extra protocols (ICMP, GRE: port 0).
func Targets(ports []uint16, protos ...uint8) []Target {
	var out []Target
	for _, p := range ports {
		out = append(out, Target{Proto: policy.ProtoTCP, Port: p}, Target{Proto: policy.ProtoUDP, Port: p})
	}
	out = append(out, Target{Proto: policy.ProtoSCTP, Port: 80})
	for _, p := range protos {
		out = append(out, Target{Proto: p})
	}
	return out
}

// Crossing is what a datapath's interpreter of its rendered rules says of
// one new connection: dropped, redirected to the L7 proxy, or neither, and
// the rules it went through.
type Crossing struct {
	Dropped, Redirected bool
	Trace               string
}

// CheckAgainstIR sends every target between every pair of endpoints
// through cross (a datapath's interpreter), over each family of a
// dual-stack lab (ForFamilies: cross must use the target's addresses,
// Addrs): a connection must be dropped
// exactly when the IR (policy.Compiled.Allows) denies it, and a TCP one to
// an L7 port redirected exactly when the model (policy.HTTPVerdict) says
// it is allowed and proxied (and the model must allow what the IR does).
// label names the round in messages.
func CheckAgainstIR(t testing.TB, lab *topology.Spec, m *policy.Model, c *policy.Compiled, label string, targets []Target,
	cross func(src, dst *topology.Endpoint, tg Target) Crossing) {
	t.Helper()
	wrong := 0
	targets = ForFamilies(lab, targets)
	eachPair(lab, func(src, dst *topology.Endpoint) {
		for _, tg := range targets {
			got := cross(src, dst, tg)
			sa, da := Addrs(src, dst, tg)
			want := c.Allows(sa, da, tg.Proto, tg.Port)
			bad := want == got.Dropped
			what := "the IR allows"
			if tg.Proto == policy.ProtoTCP && len(c.L7Ports(c.IdentityOfIP(dst.IP))) > 0 {
				v := m.HTTPVerdict(src, dst, int(tg.Port), policy.Request{Method: "GET", Path: "/"})
				if tg.Family != 0 {
					v, _ = m.HTTPVerdictFamily(src, dst, tg.Family, int(tg.Port), policy.Request{Method: "GET", Path: "/"})
				}
				if v.Allowed != want {
					t.Errorf("%s: %s -> %s %s/%d: the model says %v (%s), the IR %v", label, src.ID(), dst.ID(), policy.ProtoName(tg.Proto), tg.Port, v.Allowed, v.L7, want)
				}
				bad = bad || got.Redirected != (v.Allowed && v.Proxied)
				what = fmt.Sprintf("the model says allowed %v proxied %v; the IR allows", v.Allowed, v.Proxied)
			}
			if bad {
				if wrong++; wrong <= 5 {
					t.Errorf("%s: %s -> %s %s/%d%s: the rules say dropped %v redirected %v, %s: %v\ntrace:\n%s\nIR:\n%s",
						label, src.ID(), dst.ID(), policy.ProtoName(tg.Proto), tg.Port, familyText(tg), got.Dropped, got.Redirected, what, want, got.Trace, DumpRules(c, src, dst))
				}
			}
		}
	})
	if wrong > 5 {
		t.Errorf("%s: %d cells wrong in all", label, wrong)
	}
}

// DumpRules lists the IR entries that judge a connection from src to dst:
// the source's egress and the destination's ingress, in walking order.
func DumpRules(c *policy.Compiled, src, dst *topology.Endpoint) string {
	var b strings.Builder
	for _, s := range []struct {
		id  uint32
		dir policy.Dir
	}{{c.IdentityOfIP(src.IP), policy.Egress}, {c.IdentityOfIP(dst.IP), policy.Ingress}} {
		fmt.Fprintf(&b, "%s of identity %d, isolated %+v\n", s.dir, s.id, c.Enforced[s.id])
		for _, r := range c.RulesFor(s.id, s.dir) {
			fmt.Fprintf(&b, "  %s: %s %s %s prec %d peer %d %s\n", r.Origin, r.Tier, r.Action(), r.PortString(), r.Prec, r.PeerID, r.PeerCIDR)
		}
	}
	return b.String()
}

// familyText names a target's family in messages ("" for the primary).
func familyText(tg Target) string {
	if tg.Family == 0 {
		return ""
	}
	return fmt.Sprintf(" over IPv%d", tg.Family)
}
