package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

// TestNodePortCLI: with the example lab's backends allowing fromCIDR
// 0.0.0.0/0 and denying the clients (ingressDeny), `probe --service
// --node-port HOST --expect` agrees with the model through both hosts'
// node ports (no client gets through), and `service trace --node-port`
// explains what each side is judged on and the source the backend sees.
func TestNodePortCLI(t *testing.T) {
	testutil.RequireRoot(t)
	labFile := filepath.Join("..", "..", "examples", "services", "lab.yaml")
	write := tempWriter(t, t.TempDir())
	svc := write("np.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: np, namespace: default}\nspec:\n  type: NodePort\n  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n")
	pol := write("pol.yaml", "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: web, namespace: default}\nspec:\n  endpointSelector: {matchLabels: {app: web}}\n  ingress:\n  - fromCIDR: [0.0.0.0/0]\n  ingressDeny:\n  - fromEndpoints: [{matchLabels: {app: client}}]\n")
	name := "t-npcli"
	if _, stderr, code := runCLI(t, "up", "-f", labFile, "--name", name, "--datapath", "iptables", "--service-proxy", "iptables"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", name) })
	if _, stderr, code := runCLI(t, "service", "apply", name, "-f", svc); code != 0 {
		t.Fatal(stderr)
	}
	if _, stderr, code := runCLI(t, "policy", "apply", name, "-f", pol); code != 0 {
		t.Fatal(stderr)
	}
	for _, host := range []string{"flip", "flap"} {
		stdout, stderr, code := runCLI(t, "probe", name, "--service", "default/np", "--node-port", host, "--expect", "--timeout", "300ms", "--alpha", "1e-6")
		if code != 0 {
			t.Errorf("probe --node-port %s --expect: exit %d: %s %s", host, code, stdout, stderr)
		}
	}
	stdout, stderr, code := runCLI(t, "service", "trace", name, "--from", "client-1", "default/np", "--node-port", "flap")
	for _, want := range []string{"node port", "on host flap", "masqueraded", "every connection fails",
		"policy denies it (egress judged on 10.0.191.1 TCP/", "denied by CiliumNetworkPolicy default/web spec.ingressDeny[0]", "no rule allows it"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("trace --node-port flap: exit %d, no %q in:\n%s%s", code, want, stdout, stderr)
		}
	}
}
