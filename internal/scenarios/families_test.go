package scenarios

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/topology"
)

func TestLabFor(t *testing.T) {
	for fam, want := range map[string][]int{"4": {4}, "dual": {4, 6}, "6": {6}} {
		s, err := topology.Parse([]byte(LabFor(fam)), "lab.yaml", topology.Overrides{})
		if err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		got := s.Families()
		if len(got) != len(want) || got[0] != want[0] {
			t.Errorf("%s: families %v, want %v", fam, got, want)
		}
		ep, _ := s.Endpoint("y/c")
		if a, ok := ep.Addr(6); fam != "4" && (!ok || a.String() != "fd00:0:191::22") {
			t.Errorf("%s: y/c's IPv6 address %v", fam, a)
		}
		if len(s.Endpoints) != 9 || strings.Contains(LabFor(fam), "podCIDR:") && fam != "4" {
			t.Errorf("%s: %d endpoints", fam, len(s.Endpoints))
		}
	}
}
