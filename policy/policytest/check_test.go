package policytest

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// counting records the errors a check reports instead of failing.
type counting struct {
	*testing.T
	errors int
}

func (c *counting) Errorf(string, ...any) { c.errors++ }

// On a dual-stack lab CheckAgainstIR checks each family: an interpreter
// that judges every target by the primary addresses misses the classic
// hole (an IPv4 ipBlock allow leaves IPv6 denied).
func TestCheckAgainstIRFamilies(t *testing.T) {
	pols := Parse(t, scenarios.Named("ipBlock IPv4 only leaves IPv6 denied").Policies)
	for _, fams := range [][]int{{4}, {4, 6}, {6}} {
		lab, err := topology.Parse([]byte(scenarios.LabFor(fams...)), "scenario lab", topology.Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := policy.NewModel(lab, pols)
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.Compile()
		if err != nil {
			t.Fatal(err)
		}
		targets := Targets([]uint16{80, 81}, policy.ProtoICMP)
		if n := len(ForFamilies(lab, targets)); n != len(targets)*max(1, len(fams)) {
			t.Errorf("%v: %d targets", fams, n)
		}
		seen := map[int]bool{}
		CheckAgainstIR(t, lab, m, c, "by family", targets, func(src, dst *topology.Endpoint, tg Target) Crossing {
			sa, da := Addrs(src, dst, tg)
			seen[tg.Family] = true
			if tg.Family == 6 && tg.Proto == policy.ProtoICMP || tg.Family == 4 && tg.Proto == policy.ProtoICMPv6 {
				t.Errorf("%+v: ICMP of the other family", tg)
			}
			return Crossing{Dropped: !c.Allows(sa, da, tg.Proto, tg.Port)}
		})
		if len(fams) == 2 && (!seen[4] || !seen[6]) || len(fams) == 1 && !seen[0] {
			t.Errorf("%v: families checked %v", fams, seen)
		}
		rec := &counting{T: t}
		CheckAgainstIR(rec, lab, m, c, "primary only", targets, func(src, dst *topology.Endpoint, tg Target) Crossing {
			return Crossing{Dropped: !c.Allows(src.IP, dst.IP, tg.Proto, tg.Port)}
		})
		if (rec.errors > 0) != (len(fams) == 2) {
			t.Errorf("%v: an interpreter of the primary addresses only: %d errors", fams, rec.errors)
		}
	}
}

// Random tiered policies (IPv6 CIDRs among their peers) compile on the
// dual-stack lab to an IR that agrees with the model over both families.
func TestRandomTieredFamilies(t *testing.T) {
	lab, err := topology.Parse([]byte(scenarios.LabFor(4, 6)), "scenario lab", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	v6cidrs := 0
	for seed := range 60 {
		pols := RandomTiered(t, rand.New(rand.NewSource(int64(seed))))
		m, err := policy.NewModel(lab, pols)
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.Compile()
		if err != nil {
			t.Fatal(err)
		}
		for p := range c.CIDRIdentities {
			if p.Addr().Is6() {
				v6cidrs++
			}
		}
		CheckAgainstIR(t, lab, m, c, fmt.Sprintf("seed %d", seed), Targets([]uint16{80, 81}, policy.ProtoICMP), func(src, dst *topology.Endpoint, tg Target) Crossing {
			sa, da := Addrs(src, dst, tg)
			proto := map[uint8]string{policy.ProtoTCP: "TCP", policy.ProtoUDP: "UDP", policy.ProtoSCTP: "SCTP", policy.ProtoICMP: "ICMP", policy.ProtoICMPv6: "ICMPV6"}[tg.Proto]
			v, ok := m.VerdictFamily(src, dst, tg.Family, proto, int(tg.Port))
			if !ok || v.Allowed != c.Allows(sa, da, tg.Proto, tg.Port) {
				t.Errorf("seed %d: %s -> %s %s/%d over IPv%d: model %v (ok %v), IR %v", seed, src.ID(), dst.ID(), proto, tg.Port, tg.Family, v.Allowed, ok, c.Allows(sa, da, tg.Proto, tg.Port))
			}
			redirected := false
			if v.Allowed && tg.Proto == policy.ProtoTCP && len(c.L7Ports(c.IdentityOfIP(dst.IP))) > 0 {
				hv, _ := m.HTTPVerdictFamily(src, dst, tg.Family, int(tg.Port), policy.Request{Method: "GET", Path: "/"})
				redirected = hv.Proxied
			}
			return Crossing{Dropped: !v.Allowed, Redirected: redirected}
		})
	}
	if v6cidrs == 0 {
		t.Error("no IPv6 CIDR in 60 random policy sets")
	}
}
