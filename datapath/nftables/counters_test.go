package nftables

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

// listing writes a host's sets as nft -n list table writes them, each
// element counted 1 packet of 10 bytes, and the chains' rules with 2
// packets of 20 bytes each.
func listing(st hostState) string {
	var b strings.Builder
	b.WriteString("table inet cnlab {\n")
	for _, set := range slices.Sorted(maps.Keys(st.Sets)) {
		fmt.Fprintf(&b, "\tset %s_g%d {\n\t\ttype ipv4_addr\n\t\tcounter\n\t\telements = { ", set, st.Gen)
		for i, e := range st.Sets[set] {
			key, verdict, isMap := strings.Cut(e, " : ")
			e = strings.TrimPrefix(originKey("", key), " ") + " counter packets 1 bytes 10"
			if isMap {
				e += " : " + verdict
			}
			if i > 0 {
				b.WriteString(",\n\t\t\t     ")
			}
			b.WriteString(e)
		}
		b.WriteString(" }\n\t}\n\n")
	}
	for _, line := range strings.Split(generationDecls(st.Gen, st.layout()), "\n") {
		if r, ok := strings.CutPrefix(line, "add rule "+table+" "); ok {
			fmt.Fprintf(&b, "\t\t%s\n", strings.Replace(r, "counter", "counter packets 2 bytes 20", 1))
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// TestCountRules reads the counters of a listing: with observe, per
// element, each counting for the origin Render recorded, an endpoint of
// the host, and the isolation elements as the default deny; without,
// per verdict class.
func TestCountRules(t *testing.T) {
	for _, fams := range []string{"4", "dual", "6"} {
		t.Run(fams, func(t *testing.T) {
			lab, err := topology.Parse([]byte(labFor(fams)), "scenario lab", topology.Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			m, err := policy.NewModel(lab, policytest.Parse(t, policytest.TieredYAML+policytest.TieredNP))
			if err != nil {
				t.Fatal(err)
			}
			c, err := m.Compile()
			if err != nil {
				t.Fatal(err)
			}
			checkCountRules(t, lab, c)
		})
	}
}

func checkCountRules(t *testing.T, lab *topology.Spec, c *policy.Compiled) {
	v6 := 0 // elements of IPv6 sets counted
	for _, h := range lab.Hosts {
		st := Render(policytest.AtLevel(lab, topology.ObserveDrops), h.Name, c)
		st.Gen = 3
		got := countRules(lab, h.Name, &st, listing(st))
		want := map[string]uint64{}
		for set, elems := range st.Sets {
			if class, _ := classOf(set); class != "" {
				if strings.HasSuffix(set, "6") {
					v6 += len(elems)
				}
				for _, e := range elems {
					want[st.Origins[originKey(set, e)]]++
				}
			}
		}
		sums := map[string]uint64{}
		for _, rc := range got {
			sums[rc.Rule] += rc.Packets
			if rc.Rule == "" || rc.Endpoint == "" || rc.Bytes != 10*rc.Packets || (rc.Rule == datapath.DefaultDenyRule) != (rc.Verdict == "default-deny") {
				t.Errorf("%s: %+v", h.Name, rc)
			}
			if ep := endpoint(t, lab, rc.Endpoint); ep.Host != h.Name {
				t.Errorf("%s: %+v of an endpoint on %s", h.Name, rc, ep.Host)
			}
		}
		if len(want) == 0 || fmt.Sprint(sums) != fmt.Sprint(want) {
			t.Errorf("%s: counted %v, want %v", h.Name, sums, want)
		}

		off := Render(lab, h.Name, c)
		got = countRules(lab, h.Name, &off, listing(off))
		classes := map[string]bool{}
		for _, rc := range got {
			classes[rc.Direction+" "+rc.Verdict+" "+rc.Rule] = true
			if rc.Endpoint != "" || rc.Packets%2 != 0 || rc.Bytes != 10*rc.Packets {
				t.Errorf("%s off: %+v", h.Name, rc)
			}
		}
		for _, c := range []string{"ingress deny ", "ingress allow ", "ingress default-deny default-deny", "egress deny ", "egress allow "} {
			if !classes[c] {
				t.Errorf("%s off: no class %q: %v", h.Name, c, got)
			}
		}
	}
	if lab.HasFamily(6) && v6 == 0 {
		t.Error("no IPv6 element counted")
	}
}
