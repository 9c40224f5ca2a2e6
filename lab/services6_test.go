package lab

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/svcscenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/service"
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
	ctx := context.Background()
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
				svcs, sls, err := service.Parse([]byte(to6Addr(sc.Services)), sc.Name)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := DeleteServices(ctx, spec.Name, nil, true); err != nil {
					t.Fatal(err)
				}
				if _, err := ApplyServices(ctx, spec.Name, svcs, sls); err != nil {
					t.Fatalf("%s: %v", sc.Name, err)
				}
				var pols []*policy.Policy
				if sc.Policies != "" {
					if pols, err = policy.Parse([]byte(sc.Policies), sc.Name); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := Replace(ctx, spec.Name, pols); err != nil {
					t.Fatal(err)
				}
				m, err := ServiceModel(spec.Name)
				if err != nil {
					t.Fatal(err)
				}
				if msg := sc.Want(m); msg != "" {
					t.Errorf("%s: %s", sc.Name, msg)
				}
				for _, ref := range sc.Probe {
					f, err := m.Resolved.Frontend(ref)
					if err != nil {
						t.Fatal(err)
					}
					if !f.VIP.Is6() {
						t.Fatalf("%s: %s has cluster IP %s", sc.Name, ref, f.VIP)
					}
					for _, node := range append([]string{""}, sc.Nodes...) {
						res, err := probe.ProbeService(ctx, m, f, probe.ServiceOptions{Timeout: 300 * time.Millisecond, NodeHost: node})
						if err != nil {
							t.Fatal(err)
						}
						probe.CheckService(f, res, 0, testAlpha)
						for _, r := range res {
							for _, mm := range r.Mismatches {
								t.Errorf("%s: %s (node port on %q) from %s: %s", sc.Name, ref, node, r.From, mm)
							}
						}
					}
				}
			}
		})
	}
}
