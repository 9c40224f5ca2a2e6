package datapath_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/probe"
)

var tierTargets = []probe.Target{{Protocol: "TCP", Port: 80}, {Protocol: "TCP", Port: 81}, {Protocol: "UDP", Port: 81}}

// TestTiersKernel applies cluster policies beside NetworkPolicies on each
// netfilter datapath (iptables with addresses and with ipsets, nftables)
// and probes every pair of endpoints: an Admin Deny (z into x/a), an
// Admin Pass into a NetworkPolicy (y into x/a on TCP 80: only y/b, which
// the NetworkPolicy allows, gets through), Admin Accepts overriding a
// NetworkPolicy's isolation (y into x/a on other ports, x/c into y/b), an
// Admin Deny of egress (y/b to x on UDP 81), a Baseline default deny with
// a NetworkPolicy exception (z/a and z/b admit x/a alone through their
// NetworkPolicy, z/c is denied x and y by the Baseline tier). Every cell
// must be the model's, and a few are checked by hand. Then it changes the
// set (one Admin policy deleted: the datapaths' in-place paths), deletes
// everything (the tiers' chains and maps go), and runs the L7 case: on an
// L7 port, an Admin Accept is final (200 without the proxy for a request
// the L7 rules deny), under an Admin Pass the proxy judges (403).
func TestTiersKernel(t *testing.T) {
	for _, dp := range []string{"iptables", "iptables-ipsets", "nftables"} {
		t.Run(dp, func(t *testing.T) {
			spec := upLab(t, "t-tier-"+map[string]string{"iptables": "ipt", "iptables-ipsets": "ips", "nftables": "nft"}[dp], dp)
			ctx := context.Background()
			if _, err := lab.Apply(ctx, spec.Name, parse(t, policytest.TieredYAML+policytest.TieredNP)); err != nil {
				t.Fatal(err)
			}
			cells, err := probe.Run(ctx, spec, tierTargets, probe.Options{Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []scenarios.Cell{
				{From: "z/a", To: "x/a", Protocol: "TCP", Port: 80, Allowed: false}, // Admin Deny
				{From: "z/b", To: "x/a", Protocol: "UDP", Port: 81, Allowed: false},
				{From: "y/b", To: "x/a", Protocol: "TCP", Port: 80, Allowed: true},  // Pass, then the NetworkPolicy allows
				{From: "y/a", To: "x/a", Protocol: "TCP", Port: 80, Allowed: false}, // Pass, then x/a is isolated
				{From: "y/a", To: "x/a", Protocol: "UDP", Port: 81, Allowed: true},  // Admin Accept over the isolation
				{From: "x/b", To: "x/a", Protocol: "TCP", Port: 80, Allowed: false}, // no Admin rule: isolated
				{From: "x/c", To: "y/b", Protocol: "TCP", Port: 81, Allowed: true},  // Admin Accept over the isolation
				{From: "x/a", To: "y/b", Protocol: "TCP", Port: 80, Allowed: false},
				{From: "y/b", To: "x/b", Protocol: "UDP", Port: 81, Allowed: false}, // Admin Deny of egress
				{From: "y/b", To: "x/b", Protocol: "TCP", Port: 81, Allowed: true},
				{From: "x/a", To: "z/c", Protocol: "TCP", Port: 80, Allowed: false}, // Baseline default deny
				{From: "y/c", To: "z/c", Protocol: "UDP", Port: 81, Allowed: false},
				{From: "z/a", To: "z/c", Protocol: "TCP", Port: 80, Allowed: true},
				{From: "x/a", To: "z/b", Protocol: "TCP", Port: 80, Allowed: true}, // the NetworkPolicy's exception
				{From: "x/b", To: "z/b", Protocol: "TCP", Port: 80, Allowed: false},
			} {
				found := false
				for _, c := range cells {
					if c.From == want.From && c.To == want.To && strings.EqualFold(c.Protocol, want.Protocol) && c.Port == want.Port {
						found = true
						if c.Allowed != want.Allowed {
							t.Errorf("%s -> %s %s/%d: probed allowed=%v, want %v", want.From, want.To, want.Protocol, want.Port, c.Allowed, want.Allowed)
						}
					}
				}
				if !found {
					t.Errorf("no cell %+v", want)
				}
			}
			expectStore(t, spec, "tiers applied", tierTargets...)

			if _, err := lab.Delete(ctx, spec.Name, []string{"deny-z"}, false, ""); err != nil {
				t.Fatal(err)
			}
			expectStore(t, spec, "deny-z deleted", tierTargets...)
			if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
				t.Fatal(err)
			}
			expectStore(t, spec, "all deleted", tierTargets...)

			// L7 beneath the Admin tier.
			pols := parse(t, scenarios.L7[0].Policies+"---\n"+policytest.L7PassYAML)
			if _, err := lab.Apply(ctx, spec.Name, pols); err != nil {
				t.Fatal(err)
			}
			req := probe.HTTPRequest{Method: "GET", Path: "/private"} // the L7 rules allow GET /public only
			hcells, err := probe.RunHTTP(ctx, spec, scenarios.L7Port, req, probe.Options{Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			m, err := policy.NewModel(spec, pols)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range probe.ExpectHTTP(spec, m, hcells, req) {
				got := 0
				if c.Status != nil {
					got = *c.Status
				}
				t.Errorf("L7: %s -> %s GET /private: status %d, the model says %d", c.From, c.To, got, *c.ExpectedStatus)
			}
			status := map[string]int{}
			for _, c := range hcells {
				if c.To == "x/a" && c.Status != nil {
					status[c.From] = *c.Status
				}
			}
			for from, want := range map[string]int{"x/b": 200, "y/b": 200, "x/c": 403, "y/a": 0} {
				if status[from] != want {
					t.Errorf("L7: %s -> x/a GET /private: %d, want %d", from, status[from], want)
				}
			}
		})
	}
}
