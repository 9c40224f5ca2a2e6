package datapath_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
)

// dualStackPolicy: x/a's ingress admits x/b and x/c (identity peers) on
// TCP 8080 and 10.0.192.0/24 (flip's IPv4 pods: x/c, y/b, z/c) on TCP
// 8081; x/c's egress goes to any peer on TCP 8080 only.
const dualStackPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-in, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}, {podSelector: {matchLabels: {pod: c}}}]
    ports: [{port: 8080}]
  - from: [{ipBlock: {cidr: 10.0.192.0/24}}]
    ports: [{port: 8081}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: c-out, namespace: x}
spec:
  podSelector: {matchLabels: {pod: c}}
  policyTypes: [Egress]
  egress:
  - ports: [{port: 8080}]
`

// TestNFTablesDualStackKernel brings up the dual-stack and the IPv6-only
// example labs on the nftables datapath, applies dualStackPolicy and
// connects with real TCP sockets over each family the lab has: an
// identity peer is allowed in both families, the CIDR (IPv4) only over
// IPv4, the isolated endpoints' default deny holds in both, "any" covers
// both; x/c's egress isolation must not stop its neighbour discovery
// towards x/a on the same host (x/c -> x/a over IPv6).
func TestNFTablesDualStackKernel(t *testing.T) {
	for _, tc := range []struct{ file, name string }{
		{"../examples/dual-stack.yaml", "t-h6n-ds"},
		{"../examples/ipv6-only.yaml", "t-h6n-v6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.RequireRoot(t)
			testutil.RequireTool(t, "nft", "nftables")
			data, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := topology.Parse(data, tc.file, topology.Overrides{Name: tc.name, Datapath: "nftables"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := lab.Up(ctx, spec, lab.UpOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := lab.Down(spec.Name, nil); err != nil {
					t.Errorf("down: %v", err)
				}
			})
			ep := map[string]*topology.Endpoint{}
			for i := range spec.Endpoints {
				ep[spec.Endpoints[i].ID()] = &spec.Endpoints[i]
			}
			for _, id := range []string{"x/a", "z/a"} {
				for _, a := range ep[id].Addrs() {
					for _, port := range []uint16{8080, 8081} {
						s, err := testutil.ListenEcho(ep[id].Netns, netip.AddrPortFrom(a, port))
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(s.Close)
					}
				}
			}
			type check struct {
				from, to string
				port     uint16
				allowed  map[int]bool // by family
			}
			both := func(ok bool) map[int]bool { return map[int]bool{4: ok, 6: ok} }
			run := func(what string, checks []check) {
				t.Helper()
				for _, fam := range spec.Families() {
					for _, c := range checks {
						dst, ok := ep[c.to].Addr(fam)
						if !ok {
							t.Fatalf("%s has no IPv%d address", c.to, fam)
						}
						cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
						err := testutil.ExchangeTCP(cctx, ep[c.from].Netns, netip.AddrPortFrom(dst, c.port), 100)
						cancel()
						if got := err == nil; got != c.allowed[fam] {
							t.Errorf("%s: %s -> %s TCP/%d over IPv%d: allowed=%v, want %v (%v)", what, c.from, c.to, c.port, fam, got, c.allowed[fam], err)
						}
					}
				}
			}
			open := []check{
				{"x/b", "x/a", 8080, both(true)},
				{"y/b", "x/a", 8080, both(true)},
				{"x/c", "x/a", 8081, both(true)},
				{"x/c", "z/a", 8081, both(true)},
			}
			run("no policy", open)
			if _, err := lab.Apply(ctx, spec.Name, parse(t, dualStackPolicy)); err != nil {
				t.Fatal(err)
			}
			// Neighbour discovery again, under the policy.
			for _, e := range spec.Endpoints {
				if _, err := netns.Run(ctx, e.Netns, nil, "ip", "-6", "neigh", "flush", "all"); err != nil {
					t.Fatal(err)
				}
			}
			run("applied", []check{
				{"x/b", "x/a", 8080, both(true)},                      // identity peer, both families
				{"x/c", "x/a", 8080, both(true)},                      // same host: ND under x/c's egress isolation
				{"y/b", "x/a", 8080, both(false)},                     // another namespace's b: default deny
				{"x/b", "x/a", 8081, both(false)},                     // flap's x/b is outside the CIDR
				{"y/b", "x/a", 8081, map[int]bool{4: true, 6: false}}, // the IPv4 CIDR: IPv4 only
				{"z/b", "z/a", 8081, both(true)},                      // no policy
				{"x/c", "z/a", 8080, both(true)},                      // x/c's egress to any peer on 8080
				{"x/c", "z/a", 8081, both(false)},                     // x/c's egress default deny
			})
			if t.Failed() {
				for _, h := range spec.Hosts {
					out, _ := netns.Run(ctx, h.Netns, nil, "nft", "list", "table", "inet", "cnlab")
					fmt.Fprintf(os.Stderr, "%s:\n%s\n", h.Name, out)
				}
			}
			if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
				t.Fatal(err)
			}
			run("deleted", open)
		})
	}
}
