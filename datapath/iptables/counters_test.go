package iptables

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

// TestCountRules reads a listing as iptables-save -c writes the rendered
// chains, each rule with 1 packet of 10 bytes: every counter is an
// endpoint's rule with the verdict of the entry its origin names, or its
// default deny, and the counts are the number of rules of each (log
// rules left out).
func TestCountRules(t *testing.T) {
	pols := append(policytest.Parse(t, policytest.TieredYAML+policytest.TieredNP), policytest.Parse(t, scenarios.L7[0].Policies)...)
	for _, ov := range []topology.Overrides{{}, ipsetsOpt} {
		lab, _, c := policytest.CompilePolicies(t, pols, ov)
		lab = policytest.AtLevel(lab, topology.ObserveAll)
		for _, h := range lab.Hosts {
			st := Render(lab, h.Name, c)
			var b strings.Builder
			b.WriteString("*filter\n:FORWARD ACCEPT [5:500]\n[7:700] -A FORWARD -m comment --comment \"cnlab policy\" -j CNLAB-FWD\n")
			names := slices.Sorted(maps.Keys(st.Chains))
			want := map[string]uint64{}
			for _, n := range names {
				fmt.Fprintf(&b, ":%s - [0:0]\n", n)
			}
			for _, n := range names {
				for _, r := range st.Chains[n] {
					fmt.Fprintf(&b, "[1:10] -A %s %s\n", n, r)
					if n == fwdChain || strings.Contains(r, "NFLOG") || strings.Contains(r, l7DropComment) {
						continue
					}
					w := tokens(r)
					if i := slices.Index(w, "--comment"); i >= 0 {
						want[w[i+1]]++
					} else if strings.HasSuffix(r, "-j DROP") {
						want[datapath.DefaultDenyRule]++
					}
				}
			}
			b.WriteString("COMMIT\n")
			got := countRules(lab, h.Name, b.String())
			sums := map[string]uint64{}
			var eps []string
			for _, rc := range got {
				sums[rc.Rule] += rc.Packets
				if rc.Bytes != 10*rc.Packets || rc.Host != h.Name || (rc.Direction != "ingress" && rc.Direction != "egress") {
					t.Errorf("%s: %+v", h.Name, rc)
				}
				eps = append(eps, rc.Endpoint)
				if rc.Rule == datapath.DefaultDenyRule {
					if rc.Verdict != "default-deny" {
						t.Errorf("%+v", rc)
					}
					continue
				}
				e := entryOf(c, rc.Rule)
				if e == nil {
					t.Fatalf("%s: counter %+v names no entry", h.Name, rc)
				}
				v := "allow"
				switch {
				case e.Pass && rc.Verdict == "deny": // a Pass on to the default drop
					v = "deny"
				case e.Pass:
					v = "pass"
				case e.Deny:
					v = "deny"
				}
				if rc.Verdict != v {
					t.Errorf("%s: %+v, entry %+v", h.Name, rc, *e)
				}
			}
			if fmt.Sprint(sums) != fmt.Sprint(want) {
				t.Errorf("%s: counted\n%v\nwant\n%v", h.Name, sums, want)
			}
			sort.Strings(eps)
			for _, ep := range slices.Compact(eps) {
				if e := mustEndpoint(t, lab, ep); e.Host != h.Name {
					t.Errorf("%s: counter of %s, on %s", h.Name, ep, e.Host)
				}
			}
			if len(got) == 0 && len(want) > 0 {
				t.Errorf("%s: nothing counted", h.Name)
			}
		}
	}
}

// entryOf is the first IR entry of an origin.
func entryOf(c *policy.Compiled, origin string) *policy.Entry {
	for i := range c.Rules {
		if c.Rules[i].Origin == origin {
			return &c.Rules[i]
		}
	}
	return nil
}
