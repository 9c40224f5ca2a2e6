package main

import (
	"testing"

	"github.com/cnlab/cnlab/topology"
)

// policy trace's --from and --to take a name or an address of either
// family, which gives the connection's family.
func TestTraceEndpoint(t *testing.T) {
	spec, err := topology.Load("../../examples/dual-stack.yaml", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref, id string
		fam     int
	}{{"x/a", "x/a", 0}, {"10.0.191.20", "y/a", 4}, {"fd00:0:191::20", "y/a", 6}, {"FD00:0:192::32", "z/c", 6}, {"::ffff:10.0.192.10", "x/a", 4}} {
		ep, fam, err := traceEndpoint(spec, tc.ref)
		if err != nil || ep.ID() != tc.id || fam != tc.fam {
			t.Errorf("%s: %v %d %v, want %s %d", tc.ref, ep, fam, err, tc.id, tc.fam)
		}
	}
	if _, _, err := traceEndpoint(spec, "fd00:0:191::99"); err == nil || err.Error() != "fd00:0:191::99 is no endpoint's address in lab dual-stack" {
		t.Errorf("unknown address: %v", err)
	}
}
