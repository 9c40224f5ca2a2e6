package topology

import (
	"strings"
	"testing"
)

// up of a running lab's name with another datapath says which fields
// differ, not "a different topology" (issue 37).
func TestDescribeDiff(t *testing.T) {
	a, err := Preset("single-host", PresetOptions{}, Overrides{Datapath: "iptables"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Preset("single-host", PresetOptions{}, Overrides{Datapath: "nftables"})
	if err != nil {
		t.Fatal(err)
	}
	got := DescribeDiff(a, b, 3)
	if !strings.HasPrefix(got, "datapath iptables (you asked for nftables)") {
		t.Errorf("DescribeDiff = %q, want the datapath first", got)
	}
	t.Log(got)
	if d := Diff(a, a); len(d) != 0 {
		t.Errorf("Diff(a, a) = %v", d)
	}
	c, err := Parse([]byte(good), "good.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse([]byte("mtu: 1400\n"+good+"  - {name: e, host: flap}\n"), "good.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	got = DescribeDiff(c, d, 1)
	if want := "mtu 1500 (you asked for 1400), and 2 more differences"; got != want { // the links' MTU, the endpoints
		t.Errorf("DescribeDiff = %q, want %q", got, want)
	}
}
