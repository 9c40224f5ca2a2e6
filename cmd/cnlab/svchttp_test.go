package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

// TestServiceProbeHTTP probes a Service whose backend's port has L7
// rules (the thesis's GET /public policy on x/a, the Service x/web in
// front of it) on each datapath, with --http and --expect: GET /public
// gets 200 from x/a and GET /private the proxy's 403, from the other
// host; from the backend's host the netfilter datapaths give no
// connection and eBPF the same statuses (docs/limits.md, "L7 HTTP
// rules"), as the model and service trace say. Without --http the probe
// speaks HTTP by itself and says so.
func TestServiceProbeHTTP(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft", "nftables")
	examples := filepath.Join("..", "..", "examples")
	svc := tempWriter(t, t.TempDir())("web.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: x}\nspec:\n  clusterIP: 10.96.0.80\n  selector: {app: web}\n  ports: [{port: 80}]\n")
	for _, dp := range []string{"iptables", "nftables", "ebpf"} {
		t.Run(dp, func(t *testing.T) {
			lab := "t-svchttp-" + dp[:3]
			if _, stderr, code := runCLI(t, "up", "-f", filepath.Join(examples, "policy-lab.yaml"), "--name", lab, "--datapath", dp); code != 0 {
				t.Fatalf("up: %s", stderr)
			}
			t.Cleanup(func() { runCLI(t, "down", lab) })
			// The policy first: a Service applied after an L7 policy
			// must leave the datapath's redirect alone (iptables).
			if _, stderr, code := runCLI(t, "policy", "apply", lab, "-f", filepath.Join(examples, "policies", "l7-get-public.yaml")); code != 0 {
				t.Fatalf("policy apply: %s", stderr)
			}
			if _, stderr, code := runCLI(t, "service", "apply", lab, "-f", svc); code != 0 {
				t.Fatalf("service apply: %s", stderr)
			}
			sameHost := 0 // x/c, on x/a's host: no connection on netfilter
			if dp == "ebpf" {
				sameHost = 1
			}
			for _, c := range []struct {
				req    string
				status string
			}{{"GET /public", "200"}, {"GET /private", "403"}} {
				stdout, stderr, code := runCLI(t, "probe", lab, "--service", "x/web", "--http", c.req, "--from", "x/b", "--from", "x/c", "--connections", "10", "--expect", "-o", "json")
				if code != 0 {
					t.Errorf("probe --service --http %q --expect: exit %d: %s", c.req, code, stderr)
				}
				var v struct {
					HTTP    string `json:"http"`
					Results []struct {
						From     string         `json:"from"`
						Backends map[string]int `json:"backends"`
						Failed   int            `json:"failed"`
						Statuses map[string]int `json:"statuses"`
					} `json:"results"`
				}
				if err := json.Unmarshal([]byte(stdout), &v); err != nil {
					t.Fatalf("probe -o json: %v\n%s", err, stdout)
				}
				if v.HTTP != c.req || len(v.Results) != 2 {
					t.Fatalf("probe -o json: http %q, %d results\n%s", v.HTTP, len(v.Results), stdout)
				}
				for _, r := range v.Results {
					want := 10
					if r.From == "x/c" {
						want *= sameHost
					}
					if r.Statuses == nil || r.Statuses[c.status] != want || r.Failed != 10-want {
						t.Errorf("%s %s: statuses %v, %d failed; want %d × %s", r.From, c.req, r.Statuses, r.Failed, want, c.status)
					}
					if c.status == "200" && r.Backends["x/a"] != want {
						t.Errorf("%s %s: backends %v, want x/a %d", r.From, c.req, r.Backends, want)
					}
				}
			}
			stdout, stderr, code := runCLI(t, "probe", lab, "--service", "x/web", "--from", "x/b", "--connections", "5", "--expect")
			if code != 0 || !strings.Contains(stdout, "each connection sends GET /") || !strings.Contains(stdout, "L7 rules") {
				t.Errorf("probe --service of an L7 port without --http: exit %d, stdout\n%s\nstderr %s", code, stdout, stderr)
			}
			stdout, _, _ = runCLI(t, "service", "trace", lab, "--from", "x/c", "x/web")
			if reach := strings.Contains(stdout, "✓ x/a"); reach != (sameHost == 1) || (sameHost == 0 && !strings.Contains(stdout, "docs/limits.md")) {
				t.Errorf("service trace from x/c:\n%s", stdout)
			}
		})
	}
}
