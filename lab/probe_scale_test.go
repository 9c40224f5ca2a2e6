package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// probeScaleLab is a lab of n endpoints over two hosts joined by a wire, in
// five namespaces, as scripts/probe-scale-lab.py writes it.
func probeScaleLab(name string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nhosts:\n  - {name: flip, podCIDR: 10.0.192.0/22}\n  - {name: flap, podCIDR: 10.0.196.0/22}\n", name)
	b.WriteString("links:\n  - {between: [flip, flap], kind: wire}\nnamespaces:\n")
	tiers := []string{"front", "back", "back", "front", "batch"}
	for i, t := range tiers {
		fmt.Fprintf(&b, "  n%d: {labels: {tier: %s}}\n", i, t)
	}
	b.WriteString("endpoints:\n")
	apps := []string{"web", "db", "cache", "batch"}
	for i := 0; i < n; i++ {
		host := "flip"
		if i%2 == 1 {
			host = "flap"
		}
		fmt.Fprintf(&b, "  - {name: e%03d, namespace: n%d, host: %s, labels: {app: %s}}\n", i, i%5, host, apps[(i/5)%4])
	}
	return b.String()
}

// probeScalePolicies deny about half of the pairs, differently on TCP and UDP
// (the same set as examples/policies/probe-scale.yaml).
const probeScalePolicies = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: front-tcp-only, namespace: n1}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {tier: front}}
    ports:
    - {port: 80, protocol: TCP}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-from-web, namespace: n2}
spec:
  podSelector: {matchLabels: {app: db}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - namespaceSelector: {}
      podSelector: {matchLabels: {app: web}}
    ports:
    - {port: 80, protocol: TCP}
    - {port: 80, protocol: UDP}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: batch-egress, namespace: n3}
spec:
  podSelector: {matchLabels: {app: batch}}
  policyTypes: [Egress]
  egress:
  - to:
    - namespaceSelector: {matchLabels: {tier: batch}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: same-namespace-only, namespace: n4}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: cache-udp-only, namespace: n0}
spec:
  podSelector: {matchLabels: {app: cache}}
  policyTypes: [Ingress]
  ingress:
  - ports:
    - {port: 80, protocol: UDP}
`

// TestProbeFullMatrix probes every ordered pair of a 24-endpoint lab on
// TCP and UDP at once, all attempts in flight together, on each datapath,
// and checks every cell against the model: no cell may differ or carry an
// error, and both verdicts must occur on both protocols (a probe that
// reported everything allowed, or everything denied, fails). A model
// without the policies must disagree with the probe, so the comparison
// can fail.
func TestProbeFullMatrix(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	pols, err := policy.Parse([]byte(probeScalePolicies), "scale policies")
	if err != nil {
		t.Fatal(err)
	}
	for _, dp := range enforcingKinds() {
		t.Run(dp, func(t *testing.T) {
			name := "t-pscale-" + shortName(dp)
			spec, err := topology.Parse([]byte(probeScaleLab(name, 24)), "scale lab", topology.Overrides{Datapath: dp})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := Up(ctx, spec, UpOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				var nf *topology.NotFoundError
				if err := Down(spec.Name, nil); err != nil && !errors.As(err, &nf) {
					t.Errorf("down: %v", err)
				}
			})
			if _, err := Apply(ctx, spec.Name, pols); err != nil {
				t.Fatal(err)
			}
			m, err := policy.NewModel(spec, pols)
			if err != nil {
				t.Fatal(err)
			}
			var st probe.Stats
			start := time.Now()
			cells, err := probe.Run(ctx, spec, []probe.Target{{Protocol: "tcp", Port: 80}, {Protocol: "udp", Port: 80}}, probe.Options{Timeout: 750 * time.Millisecond, Stats: &st})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d cells in %v: %+v", len(cells), time.Since(start).Round(time.Millisecond), st)
			if want := 2 * 24 * 23; len(cells) != want {
				t.Fatalf("%d cells, want %d", len(cells), want)
			}
			count := map[string]int{}
			for _, c := range cells {
				if c.Error != "" {
					t.Errorf("%s -> %s %s/%d: %s", c.From, c.To, c.Protocol, c.Port, c.Error)
				}
				count[fmt.Sprintf("%s-%v", c.Protocol, c.Allowed)]++
			}
			for _, k := range []string{"tcp-true", "tcp-false", "udp-true", "udp-false"} {
				if count[k] == 0 {
					t.Errorf("no %s cell: the policies allow some pairs and deny others on both protocols (%v)", k, count)
				}
			}
			wrong := probe.Expect(spec, m, cells)
			for i, c := range wrong {
				if i < 10 {
					t.Errorf("%s -> %s %s/%d: probed allowed=%v, model says %v", c.From, c.To, c.Protocol, c.Port, c.Allowed, *c.Expected)
				}
			}
			if len(wrong) > 0 {
				t.Errorf("%d of %d cells differ from the model", len(wrong), len(cells))
			}
			open, err := policy.NewModel(spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(probe.Expect(spec, open, append([]probe.Cell(nil), cells...))); n != count["tcp-false"]+count["udp-false"] {
				t.Errorf("against a model without policies, %d cells differ; want the %d denied ones", n, count["tcp-false"]+count["udp-false"])
			}
		})
	}
}
