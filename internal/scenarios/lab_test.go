package scenarios

import (
	"strings"
	"testing"
)

func TestLabFor(t *testing.T) {
	if LabFor(4) != Lab {
		t.Errorf("LabFor(4) is not Lab")
	}
	dual := LabFor(4, 6)
	for _, want := range []string{"podCIDRs: [10.0.192.0/24, fd00:0:192::/64]", "ip: [10.0.191.22, fd00:0:191::22],"} {
		if !strings.Contains(dual, want) {
			t.Errorf("LabFor(4, 6) lacks %q:\n%s", want, dual)
		}
	}
	v6 := LabFor(6)
	for _, want := range []string{"podCIDRs: [fd00:0:191::/64]", "ip: [fd00:0:192::32],"} {
		if !strings.Contains(v6, want) {
			t.Errorf("LabFor(6) lacks %q:\n%s", want, v6)
		}
	}
	if strings.Contains(v6, "10.0.19") {
		t.Errorf("LabFor(6) has IPv4 addresses:\n%s", v6)
	}
}
