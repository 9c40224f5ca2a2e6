package iptables

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
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
  - fromCIDR: [10.0.191.0/24]
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
		`-s 10.0.191.0/24 -m comment --comment "CiliumNetworkPolicy x/c spec.ingressDeny[0]" -j DROP`,
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
