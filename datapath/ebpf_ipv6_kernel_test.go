package datapath_test

import (
	"context"
	"os"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
)

// TestIPv6PolicyEBPF is TestIPv6PolicyIPTables on the eBPF datapath, in
// both host routings: real TCP connections over each family of a
// dual-stack and an IPv6-only lab, before, with and after a policy that
// isolates x/a's ingress (from x/a's host: host-local, judged and
// delivered by cnlab_from_ep; from the other host: routed, judged by
// cnlab_to_ep).
func TestIPv6PolicyEBPF(t *testing.T) {
	testutil.RequireRoot(t)
	const port = 8080
	for _, tc := range []struct{ file, short string }{{"dual-stack.yaml", "ds"}, {"ipv6-only.yaml", "v6"}} {
		for _, routing := range []string{kind.HostRoutingBPF, kind.HostRoutingLegacy} {
			t.Run(tc.short+"/"+routing, func(t *testing.T) {
				data, err := os.ReadFile("../examples/" + tc.file)
				if err != nil {
					t.Fatal(err)
				}
				ov := topology.Overrides{Name: "t-h6e-" + tc.short + routing[:3], Datapath: "ebpf"}
				ov.Options.HostRouting = routing
				spec, err := topology.Parse(data, tc.file, ov)
				if err != nil {
					t.Fatal(err)
				}
				if err := lab.Up(context.Background(), spec, lab.UpOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := lab.Down(spec.Name, nil); err != nil {
						t.Errorf("down: %v", err)
					}
				})
				if spec.EBPF.HostRouting != routing {
					t.Fatalf("host routing %q, want %q", spec.EBPF.HostRouting, routing)
				}
				checkPolicyBothFamilies(t, spec, port)
			})
		}
	}
}
