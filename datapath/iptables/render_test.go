package iptables

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

func compiled(t *testing.T, yaml string, ov topology.Overrides) (*topology.Spec, *policy.Compiled) {
	t.Helper()
	return policytest.Compile(t, yaml, ov)
}

const pol = `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: c, namespace: x}
spec:
  endpointSelector: {matchLabels: {pod: a}}
  ingress:
  - fromEndpoints: [{matchLabels: {pod: b}}]
    toPorts: [{ports: [{port: "80", endPort: 81, protocol: TCP}]}]
  ingressDeny:
  - fromCIDR: [192.0.2.0/24]
`

func TestRender(t *testing.T) {
	three := 3
	lab, c := compiled(t, pol, topology.Overrides{Options: kind.Overrides{Filler: &three, FillerMode: kind.FillerNoMatch}})
	st := Render(lab, "flip", c)
	fwd := st.Chains[fwdChain]
	if len(fwd) != 3+2+1 || !strings.HasPrefix(fwd[0], "-s 198.18.0.0/32") || !strings.Contains(fwd[3], "ESTABLISHED") || !strings.Contains(fwd[5], "-d 10.0.192.10/32 -j CNLAB-I-") {
		t.Fatalf("CNLAB-FWD:\n%s", strings.Join(fwd, "\n"))
	}
	var in []string
	for name, rules := range st.Chains {
		if strings.HasPrefix(name, "CNLAB-I-") {
			in = rules
		}
	}
	want := []string{
		`-s 192.0.2.0/24 -m comment --comment "CiliumNetworkPolicy x/c spec.ingressDeny[0]" -j DROP`,
		`-s 10.0.191.11/32 -p tcp -m tcp --dport 80:81 -m comment --comment "CiliumNetworkPolicy x/c spec.ingress[0]" -j ACCEPT`,
		`-j DROP`,
	}
	if strings.Join(in, "\n") != strings.Join(want, "\n") {
		t.Errorf("ingress chain:\n%s\nwant:\n%s", strings.Join(in, "\n"), strings.Join(want, "\n"))
	}
	lab2, c2 := compiled(t, pol, topology.Overrides{Options: kind.Overrides{Filler: &three, FillerMode: kind.FillerTopOfChain}})
	fwd = Render(lab2, "flip", c2).Chains[fwdChain]
	if !strings.Contains(fwd[0], "ESTABLISHED") || !strings.HasPrefix(fwd[1], "-s 198.18.0.0/32") {
		t.Errorf("top-of-chain filler:\n%s", strings.Join(fwd, "\n"))
	}
}

func TestDiffScript(t *testing.T) {
	have := map[string][]string{"CNLAB-FWD": {"-j A"}, "CNLAB-I-1": {"-j DROP"}, "CNLAB-I-2": {"-j DROP"}}
	want := map[string][]string{"CNLAB-FWD": {"-j A"}, "CNLAB-I-1": {"-j ACCEPT"}}
	got := diffScript(have, want)
	wantScript := "*filter\n:CNLAB-I-1 - [0:0]\n:CNLAB-I-2 - [0:0]\n-A CNLAB-I-1 -j ACCEPT\n-X CNLAB-I-2\nCOMMIT\n"
	if got != wantScript {
		t.Errorf("got:\n%s\nwant:\n%s", got, wantScript)
	}
	if diffScript(want, want) != "" {
		t.Error("no change must send nothing")
	}
}

// setNamed returns the name of the set that holds term, failing if none.
func setNamed(t *testing.T, sets map[string]ipset, term string) string {
	t.Helper()
	for name, s := range sets {
		if s.Term == term {
			return name
		}
	}
	t.Fatalf("no set holds %q: %+v", term, sets)
	return ""
}

func TestRenderIPSets(t *testing.T) {
	ipsets := topology.Overrides{Options: kind.Overrides{Peers: kind.PeersIPSets}}
	lab, c := compiled(t, pol, ipsets)
	st := Render(lab, "flip", c)
	var in []string
	for name, rules := range st.Chains {
		if strings.HasPrefix(name, "CNLAB-I-") {
			in = rules
		}
	}
	deny := setNamed(t, st.Sets, "cidr 192.0.2.0/24 except [] outside the lab")
	peer := setNamed(t, st.Sets, "endpoints cilium pods{pod=b} namespace=x")
	want := []string{
		`-m set --match-set ` + deny + ` src -m comment --comment "CiliumNetworkPolicy x/c spec.ingressDeny[0]" -j DROP`,
		`-m set --match-set ` + peer + ` src -p tcp -m tcp --dport 80:81 -m comment --comment "CiliumNetworkPolicy x/c spec.ingress[0]" -j ACCEPT`,
		`-j DROP`,
	}
	if strings.Join(in, "\n") != strings.Join(want, "\n") {
		t.Errorf("ingress chain:\n%s\nwant:\n%s", strings.Join(in, "\n"), strings.Join(want, "\n"))
	}
	if s := st.Sets[deny]; s.Type != hashNet || strings.Join(s.Members, " ") != "192.0.2.0/24" || !strings.HasPrefix(deny, "cnlab-n-") || len(deny) > 31 {
		t.Errorf("%s: %+v", deny, s)
	}
	if s := st.Sets[peer]; s.Type != hashIP || strings.Join(s.Members, " ") != "10.0.191.11" || !strings.HasPrefix(peer, "cnlab-s-") {
		t.Errorf("%s: %+v", peer, s)
	}
	// Host flap has no chain naming these sets: it holds none.
	if sets := Render(lab, "flap", c).Sets; len(sets) != 0 {
		t.Errorf("flap has sets: %+v", sets)
	}
	// Without ipsets, no set and the rules of before.
	if plain, c := compiled(t, pol, topology.Overrides{}); Render(plain, "flip", c).Sets != nil {
		t.Error("sets rendered without peers: ipsets")
	}
}

// TestRenderIPSetsTerms renders seed 003's policy shape: one rule and one
// set per term, the terms that select nobody included, in the order
// written.
func TestRenderIPSetsTerms(t *testing.T) {
	terms := scenarios.Named(scenarios.TermsName).Policies
	lab, c := compiled(t, terms, topology.Overrides{Options: kind.Overrides{Peers: kind.PeersIPSets}})
	st := Render(lab, "flip", c)
	var in []string
	for name, rules := range st.Chains {
		if strings.HasPrefix(name, "CNLAB-I-") {
			in = rules
		}
	}
	if len(in) != 4 || len(st.Sets) != 3 {
		t.Fatalf("ingress chain (want 3 set rules and a drop):\n%s\nsets: %+v", strings.Join(in, "\n"), st.Sets)
	}
	for i, key := range []string{"pod=b", "key0=value0,key1=value1", "key2=value2,key3=value3"} {
		name := setNamed(t, st.Sets, "endpoints cilium pods{"+key+"} namespace=x")
		if !strings.HasPrefix(in[i], "-m set --match-set "+name+" src -m comment") {
			t.Errorf("rule %d: %s, want set %s", i, in[i], name)
		}
		if n := len(st.Sets[name].Members); n != map[bool]int{true: 1, false: 0}[i == 0] {
			t.Errorf("set of %s has %d members", key, n)
		}
	}
	// The addresses datapath renders the one term that selects someone.
	lab2, c2 := compiled(t, terms, topology.Overrides{})
	for name, rules := range Render(lab2, "flip", c2).Chains {
		if strings.HasPrefix(name, "CNLAB-I-") && len(rules) != 2 {
			t.Errorf("addresses: %s", strings.Join(rules, "\n"))
		}
	}
}

// TestRenderIPSetsAnyAddress: hash:net refuses 0.0.0.0/0, so a CIDR term
// of every address (an ipBlock) is its two halves; a CiliumNetworkPolicy's
// is every address but the lab's own.
func TestRenderIPSetsAnyAddress(t *testing.T) {
	any := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: any, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{ipBlock: {cidr: 0.0.0.0/0}}]
`
	lab, c := compiled(t, any, topology.Overrides{Options: kind.Overrides{Peers: kind.PeersIPSets}})
	st := Render(lab, "flip", c)
	name := setNamed(t, st.Sets, "cidr 0.0.0.0/0 except []")
	if got := strings.Join(st.Sets[name].Members, " "); got != "0.0.0.0/1 128.0.0.0/1" {
		t.Errorf("members of 0.0.0.0/0: %s", got)
	}
	cnp := `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: any, namespace: x}
spec:
  endpointSelector: {matchLabels: {pod: a}}
  ingress:
  - fromCIDR: [0.0.0.0/0]
`
	lab, c = compiled(t, cnp, topology.Overrides{Options: kind.Overrides{Peers: kind.PeersIPSets}})
	st = Render(lab, "flip", c)
	name = setNamed(t, st.Sets, "cidr 0.0.0.0/0 except [] outside the lab")
	var want []string
	for _, p := range policy.Subtract(netip.MustParsePrefix("0.0.0.0/0"), policy.LabPrefixes(lab)) {
		want = append(want, p.String())
	}
	if got := strings.Join(st.Sets[name].Members, " "); got != strings.Join(want, " ") || strings.Contains(got, "10.0.191.0/24") {
		t.Errorf("members of a CiliumNetworkPolicy's 0.0.0.0/0: %s, want %s", got, strings.Join(want, " "))
	}
}

func TestSetsScript(t *testing.T) {
	a := ipset{Type: hashIP, Members: []string{"10.0.0.1", "10.0.0.2"}}
	b := ipset{Type: hashNet, Members: []string{"10.1.0.0/16"}}
	empty := ipset{Type: hashIP, Members: []string{}}
	have := map[string]ipset{"cnlab-s-a": a, "cnlab-s-e": empty}
	want := map[string]ipset{"cnlab-s-a": a, "cnlab-n-b": b, "cnlab-s-e": {Type: hashIP, Members: []string{"10.0.0.9"}}}
	exists := func(n string) bool { _, ok := have[n]; return ok }
	got := setsScript(have, want, exists)
	wantScript := `create cnlab-n-b-new hash:net family inet maxelem 65536
flush cnlab-n-b-new
add cnlab-n-b-new 10.1.0.0/16
create cnlab-n-b hash:net family inet maxelem 65536
swap cnlab-n-b-new cnlab-n-b
destroy cnlab-n-b-new
create cnlab-s-e-new hash:ip family inet maxelem 65536
flush cnlab-s-e-new
add cnlab-s-e-new 10.0.0.9
swap cnlab-s-e-new cnlab-s-e
destroy cnlab-s-e-new
`
	if got != wantScript {
		t.Errorf("got:\n%s\nwant:\n%s", got, wantScript)
	}
	if setsScript(want, want, exists) != "" {
		t.Error("no change must send nothing")
	}
	if gone := goneSets(want, have); len(gone) != 1 || gone[0] != "cnlab-n-b" {
		t.Errorf("gone: %v", gone)
	}
}
