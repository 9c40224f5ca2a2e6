package policy

import (
	"reflect"
	"strings"
	"testing"
)

// Tricky layouts of policy files: what Encode stores must re-parse to the
// same policies, or the next apply silently drops or changes one.
var roundTripInputs = map[string]string{
	"directive and a document on its marker line": "%YAML 1.1\n---\n" + npHead + "spec: {podSelector: {}}\n" +
		"--- {apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, metadata: {name: q, namespace: x}, spec: {podSelector: {matchLabels: {app: db}}}}\n",
	"directives": "%YAML 1.1\n%TAG !x! tag:cnlab.example,2026:\n---\n" + npHead + "spec: {podSelector: {}}\n---\n" + cnpHead + "spec: {endpointSelector: {}, ingress: [{}]}\n",
	"comments": "# leading comment\n---\n# head\n" + npHead + "spec: # the spec\n  podSelector: {} # all\n# --- not a marker\n---\n# only a comment\n---\n" +
		cnpHead + "spec: {endpointSelector: {}, ingress: [{}]}\n",
	"block scalar with markers": npHead[:len(npHead)-len("metadata: {name: p, namespace: x}\n")] +
		"metadata:\n  name: p\n  namespace: x\n  annotations:\n    note: |\n      ---\n      ...\n      --- x\n" +
		"spec: {podSelector: {}}\n---\n" + cnpHead + "spec: {endpointSelector: {}, ingress: [{}]}\n",
	"several documents and a trailing end marker": npHead + "spec: {podSelector: {}}\n...\n---\n" + cnpHead +
		"spec: {endpointSelector: {}, ingress: [{}]}\n---\n" + strings.ReplaceAll(npHead, "name: p", "name: r") +
		"spec: {podSelector: {}, ingress: [{ports: [{port: 80}]}]}\n...\n",
	"null document between": npHead + "spec: {podSelector: {}}\n---\n~\n--- {apiVersion: cilium.io/v2, kind: CiliumNetworkPolicy, metadata: {name: c}, spec: {endpointSelector: {}, ingress: [{}]}}\n",
}

func TestPolicyRoundTrip(t *testing.T) {
	for name, in := range roundTripInputs {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(in), "f.yaml"); err != nil {
				t.Fatalf("does not parse: %v", err)
			}
			checkRoundTrip(t, []byte(in))
		})
	}
}

// checkRoundTrip parses data; when it holds policies, what Encode stores
// must parse to the same policies and encode to the same text.
func checkRoundTrip(t *testing.T, data []byte) {
	t.Helper()
	first, err := Parse(data, "f.yaml")
	if err != nil {
		return
	}
	stored := Encode(first)
	second, err := Parse(stored, "f.yaml")
	if err != nil {
		t.Fatalf("stored text does not parse: %v\ninput:\n%s\nstored:\n%s", err, data, stored)
	}
	if again := Encode(second); string(again) != string(stored) {
		t.Errorf("stored text changes when stored again:\n%s\nthen:\n%s", stored, again)
	}
	if len(first) != len(second) {
		t.Fatalf("%d policies, %d after storing\ninput:\n%s\nstored:\n%s", len(first), len(second), data, stored)
	}
	for i := range first {
		a, b := *first[i], *second[i]
		a.Raw, b.Raw = "", ""
		if !reflect.DeepEqual(a, b) {
			t.Errorf("policy %d changed when stored:\n%+v\nthen:\n%+v\ninput:\n%s\nstored:\n%s", i+1, a, b, data, stored)
		}
	}
}

// FuzzPolicyRoundTrip checks that any policy file that parses stores as
// text that re-parses to the same policies.
func FuzzPolicyRoundTrip(f *testing.F) {
	for _, in := range roundTripInputs {
		f.Add([]byte(in))
	}
	f.Add([]byte(npHead + "spec: {podSelector: {matchLabels: {app: web}}, ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}], ports: [{port: 80, endPort: 90}]}]}\n"))
	f.Add([]byte(npHead + "spec: {podSelector: {}, egress: [{to: [{ipBlock: {cidr: 'fd00::/16', except: ['fd00:1::/32', 'fd00:2::9']}}]}]}\n"))
	f.Add([]byte(cnpHead + "spec: {endpointSelector: {}, ingress: [{fromCIDR: ['2001:db8::1', '::/0']}, {fromCIDRSet: [{cidr: '2001:db8::/32', except: ['2001:db8::/64']}]}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkRoundTrip(t, data) })
}
