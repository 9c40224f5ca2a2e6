package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/testutil"
)

// TestClusterPolicyCLI drives the cluster policy contract on every
// datapath, as a user does: up -f, policy apply -f of a file mixing
// ClusterNetworkPolicy, NetworkPolicy and BaselineAdminNetworkPolicy,
// probe --expect (the model includes the tiers), trace naming the tier,
// the policy, its priority and rule, show listing the tiers in order,
// delete by bare name and --all, down.
func TestClusterPolicyCLI(t *testing.T) {
	testutil.RequireRoot(t)
	examples := filepath.Join("..", "..", "examples")
	for _, dp := range kind.All() {
		t.Run(dp.String(), func(t *testing.T) {
			if miss := dp.Missing(&kind.Options{}); miss != "" {
				if testutil.InCI() {
					t.Fatalf("datapath %s: %s", dp, miss)
				}
				t.Skipf("skipping datapath %s: %s", dp, miss)
			}
			lab := "t-tier-" + dp.String()[:2]
			if _, stderr, code := runCLI(t, "up", "-f", filepath.Join(examples, "policy-lab.yaml"), "--name", lab, "--datapath", dp.String()); code != 0 {
				t.Fatalf("up: %s", stderr)
			}
			t.Cleanup(func() { runCLI(t, "down", lab) })
			stdout, stderr, code := runCLI(t, "policy", "apply", lab, "-f", filepath.Join(examples, "policies", "cluster-tiers.yaml"))
			if code != 0 || !strings.Contains(stdout, "ClusterNetworkPolicy protect-back created") || !strings.Contains(stdout, "BaselineAdminNetworkPolicy default created") {
				t.Fatalf("apply: %d %s %s", code, stdout, stderr)
			}
			for _, port := range []string{"80", "81"} {
				for _, proto := range []string{"tcp", "udp"} {
					if _, stderr, code := runCLI(t, "probe", lab, "--port", port, "--protocol", proto, "--expect"); code != 0 {
						t.Errorf("probe --expect %s/%s: exit %d: %s", proto, port, code, stderr)
					}
				}
			}
			for _, c := range []struct{ from, to, port, want string }{
				{"z/a", "y/a", "80", "denied by ClusterNetworkPolicy protect-back (Admin, priority 10) spec.ingress[1] Deny"},
				{"x/a", "y/a", "80", "allowed by NetworkPolicy y/web-from-front spec.ingress[0] (after ClusterNetworkPolicy protect-back (Admin, priority 10) spec.ingress[0] Pass)"},
				{"x/a", "y/b", "80", "(after ClusterNetworkPolicy protect-back (Admin, priority 10) spec.ingress[0] Pass)"},
				{"x/a", "z/a", "80", "denied by BaselineAdminNetworkPolicy default (Baseline) spec.ingress[1] Deny"},
				{"z/b", "z/a", "81", "allowed by BaselineAdminNetworkPolicy default (Baseline) spec.ingress[0] Allow"},
			} {
				stdout, _, code := runCLI(t, "policy", "trace", lab, "--from", c.from, "--to", c.to, "--port", c.port)
				if code != 0 || !strings.Contains(stdout, c.want) {
					t.Errorf("trace %s -> %s: exit %d, want %q in:\n%s", c.from, c.to, code, c.want, stdout)
				}
			}
			stdout, _, code = runCLI(t, "policy", "show", lab, "-o", "json")
			var sv struct{ Policies []string }
			if code != 0 || json.Unmarshal([]byte(stdout), &sv) != nil ||
				strings.Join(sv.Policies, ",") != "ClusterNetworkPolicy protect-back,NetworkPolicy y/web-from-front,BaselineAdminNetworkPolicy default" {
				t.Errorf("show -o json: %d %s", code, stdout)
			}
			if stdout, stderr, code := runCLI(t, "policy", "delete", lab, "protect-back"); code != 0 || !strings.Contains(stdout, "ClusterNetworkPolicy protect-back deleted") {
				t.Errorf("delete by bare name: %d %s %s", code, stdout, stderr)
			}
			if _, stderr, code := runCLI(t, "probe", lab, "--port", "80", "--expect"); code != 0 {
				t.Errorf("probe --expect after the delete: %d %s", code, stderr)
			}
			if stdout, _, code := runCLI(t, "policy", "delete", lab, "--all"); code != 0 || strings.Count(stdout, "deleted") != 2 {
				t.Errorf("delete --all: %d %s", code, stdout)
			}
			if stdout, _, code := runCLI(t, "policy", "show", lab, "-o", "json"); code != 0 || !strings.Contains(stdout, `"policies": []`) {
				t.Errorf("show after delete --all: %s", stdout)
			}
		})
	}
}
