package lab

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/svcscenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/topology"
)

// to6 turns the service scenarios' IPv4 lab and documents into IPv6-only
// ones: the hosts' pod CIDRs, a manual slice's addresses and type.
var to6 = strings.NewReplacer("podCIDR: 10.0.192.0/24", "podCIDR: 'fd00:0:192::/64'",
	"podCIDR: 10.0.191.0/24", "podCIDR: 'fd00:0:191::/64'",
	"10.0.192.", "'fd00:0:192::", "10.0.191.", "'fd00:0:191::",
	"addressType: IPv4", "addressType: IPv6")

// to6Addr closes the quotes to6 opens around a slice's addresses.
func to6Addr(s string) string {
	s = to6.Replace(s)
	for _, n := range []string{"2", "3"} {
		s = strings.ReplaceAll(s, "::"+n+"]", "::"+n+"']")
	}
	return s
}

// TestServiceScenarios6 runs every service scenario on an IPv6-only lab
// with the ebpf proxy (bpf host routing over VXLAN, legacy host routing
// over a wire, socket-level translation), the probe matching the model
// for every client and frontend, as TestServiceScenarios does over IPv4.
func TestServiceScenarios6(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		name, link string
		ov         kind.Overrides
	}{
		{"h7s-sv6-eb", "vxlan", kind.Overrides{}},
		{"h7s-sv6-el", "wire", kind.Overrides{HostRouting: kind.HostRoutingLegacy}},
		{"h7s-sv6-es", "wire", kind.Overrides{SocketLB: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := to6.Replace(fmt.Sprintf(svcscenarios.Lab, c.name, c.link))
			spec, err := topology.Parse([]byte(text), "IPv6 service lab",
				topology.Overrides{Datapath: string(kind.EBPF), Proxy: string(kind.ProxyEBPF), Options: c.ov})
			if err != nil {
				t.Fatal(err)
			}
			spec = upForTest(t, spec)
			for _, sc := range svcscenarios.Scenarios {
				runServiceScenario(t, spec.Name, sc, to6Addr(sc.Services), 6)
			}
		})
	}
}
