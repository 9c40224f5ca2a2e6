package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
)

func TestPolicyAndProbeCLI(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy", "iptables")
	lab := "t-pol"
	examples := filepath.Join("..", "..", "examples")
	if _, stderr, code := runCLI(t, "up", "-f", filepath.Join(examples, "policy-lab.yaml"), "--name", lab, "--datapath", "iptables"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", lab) })
	stdout, stderr, code := runCLI(t, "policy", "apply", lab, "-f", filepath.Join(examples, "policies", "web-from-front.yaml"),
		"-f", filepath.Join(examples, "policies", "cilium-deny.yaml"))
	if code != 0 || !strings.Contains(stdout, "NetworkPolicy y/web-from-front created") {
		t.Fatalf("apply: %d %s %s", code, stdout, stderr)
	}
	// Applying the same file again changes nothing.
	stdout, _, _ = runCLI(t, "policy", "apply", lab, "-f", filepath.Join(examples, "policies", "web-from-front.yaml"))
	if !strings.Contains(stdout, "NetworkPolicy y/web-from-front unchanged") {
		t.Errorf("re-apply: %s", stdout)
	}
	// probe -o json: the documented shape, every cell as the model says.
	stdout, stderr, code = runCLI(t, "probe", lab, "--port", "80", "--expect", "-o", "json")
	if code != 0 {
		t.Fatalf("probe --expect: exit %d: %s", code, stderr)
	}
	var pv struct {
		Lab      string
		Port     int
		Protocol string
		Results  []struct {
			From, To          string
			Allowed, Expected *bool
		}
	}
	if err := json.Unmarshal([]byte(stdout), &pv); err != nil {
		t.Fatal(err)
	}
	if pv.Lab != lab || pv.Port != 80 || pv.Protocol != "tcp" || len(pv.Results) != 72 {
		t.Fatalf("probe json: %s %d %s %d cells", pv.Lab, pv.Port, pv.Protocol, len(pv.Results))
	}
	denied := 0
	for _, r := range pv.Results {
		if r.Allowed == nil || r.Expected == nil || r.From == "" || r.To == "" || r.From == r.To {
			t.Fatalf("bad cell %+v", r)
		}
		if !*r.Allowed {
			denied++
		}
	}
	if denied == 0 {
		t.Error("the policies deny nothing on tcp/80")
	}
	// trace explains a denied cell.
	stdout, _, code = runCLI(t, "policy", "trace", lab, "--from", "z/a", "--to", "x/a", "--port", "80")
	if code != 0 || !strings.Contains(stdout, "DENIED") || !strings.Contains(stdout, "denied by CiliumNetworkPolicy x/protect-a spec.ingressDeny[0]") {
		t.Errorf("trace: %s", stdout)
	}
	stdout, _, code = runCLI(t, "policy", "show", lab, "-o", "json")
	var sv struct {
		Policies []string
		Rules    []json.RawMessage
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &sv) != nil || len(sv.Policies) != 4 || len(sv.Rules) == 0 {
		t.Errorf("show: %d %s", code, stdout)
	}
	// Break enforcement behind cnlab's back: --expect must catch it.
	if _, stderr, code := runCLI(t, "exec", lab, "host/flip", "--", "iptables-legacy", "-F", "CNLAB-FWD"); code != 0 {
		t.Fatal(stderr)
	}
	_, stderr, code = runCLI(t, "probe", lab, "--port", "80", "--expect")
	if code != 1 || !strings.Contains(stderr, "differ from the policy model") || !strings.Contains(stderr, "probed allowed, expected denied") {
		t.Errorf("probe --expect with broken rules: exit %d %s", code, stderr)
	}
	// Bad input: exit 2, one clear line, nothing changed.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - ports: [{port: 99999}]\n"), 0o644)
	_, stderr, code = runCLI(t, "policy", "apply", lab, "-f", bad)
	if code != 2 || !strings.Contains(stderr, bad+": document 1 (NetworkPolicy x/p): spec.ingress[0].ports[0].port: 99999 is not a port number") {
		t.Errorf("bad policy: %d %q", code, stderr)
	}
	os.WriteFile(bad, []byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: prod}\nspec: {podSelector: {}}\n"), 0o644)
	if _, stderr, code = runCLI(t, "policy", "apply", lab, "-f", bad); code != 2 || !strings.Contains(stderr, `namespace "prod" does not exist in lab t-pol`) {
		t.Errorf("unknown namespace: %d %q", code, stderr)
	}
	if _, stderr, code = runCLI(t, "policy", "delete", lab, "x/nothing"); code != 2 || !strings.Contains(stderr, `policy "x/nothing" not found`) {
		t.Errorf("delete unknown: %d %q", code, stderr)
	}
	if stdout, _, code = runCLI(t, "policy", "delete", lab, "--all"); code != 0 || strings.Count(stdout, "deleted") != 4 {
		t.Errorf("delete --all: %d %s", code, stdout)
	}
	if _, stderr, code = runCLI(t, "probe", lab, "--protocol", "sctp"); code != 1 || !strings.Contains(stderr, "not supported by this kernel") {
		t.Errorf("sctp probe: %d %q", code, stderr)
	}
	// A chain lab has no datapath: policy commands say so, exit 2.
	if _, stderr, code := runCLI(t, "up", "--preset", "chain", "--length", "1", "--name", "t-pol-chain"); code != 0 {
		t.Fatal(stderr)
	}
	defer runCLI(t, "down", "t-pol-chain")
	if _, stderr, code = runCLI(t, "policy", "show", "t-pol-chain"); code != 2 || !strings.Contains(stderr, "a chain lab has no hosts to enforce policies on") {
		t.Errorf("policy on a chain lab: %d %q", code, stderr)
	}
	// ... but the probe works on it: client and server reach each other.
	if stdout, stderr, code := runCLI(t, "probe", "t-pol-chain", "--expect", "-o", "json"); code != 0 || strings.Count(stdout, `"allowed": true`) != 2 {
		t.Errorf("probe of a chain lab: %d %s %s", code, stdout, stderr)
	}
}
