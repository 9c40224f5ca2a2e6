package probe

import (
	"testing"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// denyServerLab is the single-host preset with the server isolated for
// ingress, and its model.
func denyServerLab(t *testing.T) (*topology.Spec, *policy.Model) {
	t.Helper()
	lab, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t-expect"})
	if err != nil {
		t.Fatal(err)
	}
	pols, err := policy.Parse([]byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-in, namespace: default}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
`), "deny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	return lab, m
}

// Expect marks every cell with the model's verdict and returns exactly the
// cells that differ from it.
func TestExpect(t *testing.T) {
	lab, m := denyServerLab(t)
	cells := []Cell{
		{From: "default/client", To: "default/server", Protocol: "tcp", Port: 80, Allowed: false}, // as the model says
		{From: "default/server", To: "default/client", Protocol: "tcp", Port: 80, Allowed: true},  // as the model says
		{From: "default/client", To: "default/server", Protocol: "udp", Port: 53, Allowed: true},  // a bypass
		{From: "default/server", To: "default/client", Protocol: "udp", Port: 53, Allowed: false}, // a drop too many
	}
	wrong := Expect(lab, m, cells)
	for i, want := range []bool{false, true, false, true} {
		if cells[i].Expected == nil || *cells[i].Expected != want {
			t.Errorf("cell %d: expected %v, want %v", i, cells[i].Expected, want)
		}
	}
	if len(wrong) != 2 || wrong[0].Protocol != "udp" || wrong[0].To != "default/server" || wrong[1].To != "default/client" {
		t.Errorf("wrong cells: %+v", wrong)
	}
}

// An attempt that failed with an error (unreachable, a reset) rather than
// a clean timeout proves nothing about policy: even where the model says
// denied, the cell is not a match (issue 32: it used to count as denied).
func TestExpectErrorIsNotDenied(t *testing.T) {
	lab, m := denyServerLab(t)
	cells := []Cell{
		{From: "default/client", To: "default/server", Protocol: "tcp", Port: 80, Allowed: false},                       // a clean timeout: denied
		{From: "default/client", To: "default/server", Protocol: "udp", Port: 53, Allowed: false, Error: "unreachable"}, // an error, not a denial
	}
	wrong := Expect(lab, m, cells)
	if len(wrong) != 1 || wrong[0].Protocol != "udp" {
		t.Fatalf("wrong cells: %+v, want only the errored one", wrong)
	}
	if cells[1].Matches() {
		t.Error("an errored cell matches the model")
	}
	if !cells[0].Matches() {
		t.Error("a clean denial does not match the model")
	}
}

// Expect judges a cell over the addresses of its family: an ipBlock of
// one family allows that family only.
func TestExpectFamily(t *testing.T) {
	lab, err := topology.Parse([]byte(`name: t-fam
hosts:
  - {name: h, podCIDRs: [10.0.192.0/24, fd00:0:192::/64]}
endpoints:
  - {name: a, ip: [10.0.192.10, fd00:0:192::10], labels: {app: a}}
  - {name: b, ip: [10.0.192.11, fd00:0:192::11], labels: {app: b}}
`), "t.yaml", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	pols, err := policy.Parse([]byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-from-v4, namespace: default}
spec:
  podSelector: {matchLabels: {app: b}}
  ingress:
  - from: [{ipBlock: {cidr: 10.0.192.0/24}}]
`), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	cells := []Cell{
		{From: "default/a", To: "default/b", Protocol: "tcp", Port: 80, Family: 4, Allowed: true},
		{From: "default/a", To: "default/b", Protocol: "tcp", Port: 80, Family: 6, Allowed: false},
	}
	if wrong := Expect(lab, m, cells); len(wrong) != 0 {
		t.Errorf("cells differing from the model: %+v", wrong)
	}
}
