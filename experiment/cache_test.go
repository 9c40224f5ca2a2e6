package experiment

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cnlab/cnlab/topology"
)

// A topology file is read once per Spec: checking every point, expanding
// and building the labs use the bytes read first (here: after the file is
// gone).
func TestTopologyFileReadOnce(t *testing.T) {
	dir := t.TempDir()
	topo := "name: t\nhosts: [{name: a, podCIDR: 10.0.192.0/24}]\nendpoints:\n  - {name: client, host: a, labels: {app: client}}\n  - {name: server, host: a, labels: {app: server}}\n"
	if err := os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(topo), 0o644); err != nil {
		t.Fatal(err)
	}
	exp := "workloads: [{kind: tcp-stream}, {kind: tcp-rr}]\nmatrix: {topology: [t.yaml], policies: [0, 10, 20]}\n"
	s, err := Parse([]byte(exp), filepath.Join(dir, "x.yaml"), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "t.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Override(Overrides{Repetitions: 2}); err != nil {
		t.Fatalf("validating again read the file again: %v", err)
	}
	if _, err := s.loadTopology("t.yaml", topology.Overrides{Name: "lab"}); err != nil {
		t.Fatalf("building the lab read the file again: %v", err)
	}
}

// Points are expanded once; each call gets its own copy.
func TestPointsOnce(t *testing.T) {
	s, err := Parse([]byte("workloads: [{kind: tcp-stream}]\nmatrix: {policies: [0, 10]}\n"), "x.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Points()
	a[0].Repetitions = 99
	b, _ := s.Points()
	if len(b) != 2 || b[0].Repetitions == 99 {
		t.Errorf("Points returned the cached slice itself: %+v", b)
	}
	if _, err := s.Override(Overrides{Repetitions: 5}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Points(); c[0].Repetitions != 5 {
		t.Errorf("Override did not expand the points again: repetitions %d", c[0].Repetitions)
	}
}
