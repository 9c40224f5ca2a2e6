package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
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
	// A directory of both files (and a file apply does not read), as
	// kubectl apply -f DIR; --dry-run says what would change and changes
	// neither the kernel nor the stored set.
	polDir := t.TempDir()
	for _, f := range []string{"web-from-front.yaml", "cilium-deny.yaml"} {
		data, err := os.ReadFile(filepath.Join(examples, "policies", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(polDir, f), data, 0o644)
	}
	os.WriteFile(filepath.Join(polDir, "README.md"), []byte("not a policy\n"), 0o644)
	kernelBefore, _, _ := runCLI(t, "policy", "show", lab, "--kernel")
	stdout, stderr, code := runCLI(t, "policy", "apply", lab, "-f", polDir, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "NetworkPolicy y/web-from-front created (dry run)\n") ||
		!strings.Contains(stdout, "CiliumNetworkPolicy x/protect-a created (dry run)\n") ||
		!strings.Contains(stdout, "datapath iptables would change:\n") || !strings.Contains(stdout, "    chain CNLAB-") {
		t.Errorf("apply --dry-run: %d %s %s", code, stdout, stderr)
	}
	if kernelAfter, _, _ := runCLI(t, "policy", "show", lab, "--kernel"); kernelState(kernelAfter) != kernelState(kernelBefore) || !strings.Contains(kernelAfter, "no policies") {
		t.Errorf("--dry-run changed the lab:\n%s\nthen\n%s", kernelBefore, kernelAfter)
	}
	stdout, stderr, code = runCLI(t, "policy", "apply", lab, "-f", filepath.Join(examples, "policies", "web-from-front.yaml"),
		"-f", filepath.Join(examples, "policies", "cilium-deny.yaml"))
	if code != 0 || !strings.Contains(stdout, "NetworkPolicy y/web-from-front created") {
		t.Fatalf("apply: %d %s %s", code, stdout, stderr)
	}
	// Applying the same file again changes nothing.
	stdout, _, _ = runCLI(t, "policy", "apply", lab, "-f", filepath.Join(examples, "policies", "web-from-front.yaml"))
	if !strings.Contains(stdout, "NetworkPolicy y/web-from-front unchanged") {
		t.Errorf("re-apply: %s", stdout)
	}
	// ... nor does the directory holding the same files.
	if stdout, stderr, code = runCLI(t, "policy", "apply", lab, "-f", polDir); code != 0 || strings.Count(stdout, " unchanged\n") != 4 {
		t.Errorf("apply -f DIR: %d %s %s", code, stdout, stderr)
	}
	// trace --port NAME: the destination's named port, its protocol too.
	stdout, _, code = runCLI(t, "policy", "trace", lab, "--from", "x/a", "--to", "y/a", "--port", "serve-80-tcp")
	if code != 0 || !strings.HasPrefix(stdout, "x/a -> y/a tcp/80 (serve-80-tcp): ALLOWED\n") || !strings.Contains(stdout, "allowed by NetworkPolicy y/web-from-front spec.ingress[0]") {
		t.Errorf("trace a named port: %d %s", code, stdout)
	}
	stdout, _, code = runCLI(t, "policy", "trace", lab, "--from", "z/a", "--to", "y/a", "--port", "serve-81-udp", "-o", "json")
	var tv struct {
		Protocol, PortName string
		Port               int
		Allowed            bool
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &tv) != nil || tv.Protocol != "udp" || tv.Port != 81 || tv.PortName != "serve-81-udp" || tv.Allowed {
		t.Errorf("trace a named udp port: %d %s", code, stdout)
	}
	if _, stderr, code = runCLI(t, "policy", "trace", lab, "--from", "x/a", "--to", "y/a", "--port", "http"); code != 2 ||
		stderr != "cnlab: --port http: y/a has no port of that name (its named ports: serve-80-tcp (80/tcp), serve-81-udp (81/udp))\n" {
		t.Errorf("trace an undeclared port name: %d %q", code, stderr)
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

// policy trace --port NAME resolves the name on the destination's
// declared ports, as Kubernetes resolves a named port: the port and its
// protocol; --protocol must agree; a name the destination does not
// declare is an error listing the names it does.
func TestTraceNamedPort(t *testing.T) {
	dst := &topology.Endpoint{Name: "a", Namespace: "x", Ports: []topology.Port{
		{Name: "http", Port: 8080, Protocol: "TCP"}, {Port: 9000, Protocol: "TCP"}, {Name: "dns", Port: 53, Protocol: "UDP"}}}
	for _, c := range []struct {
		name, proto string
		given       bool
		port        int
		wantProto   string
		err         string
	}{
		{"http", "TCP", false, 8080, "TCP", ""},
		{"http", "TCP", true, 8080, "TCP", ""},
		{"dns", "TCP", false, 53, "UDP", ""},
		{"dns", "UDP", true, 53, "UDP", ""},
		{"dns", "TCP", true, 0, "", `--port dns: x/a's port "dns" is 53/udp, not tcp: drop --protocol or give --protocol udp`},
		{"web", "TCP", false, 0, "", "--port web: x/a has no port of that name (its named ports: http (8080/tcp), dns (53/udp))"},
	} {
		port, proto, err := namedPort(dst, c.name, c.proto, c.given)
		if c.err != "" {
			var ue usageError
			if err == nil || err.Error() != c.err || !errors.As(err, &ue) {
				t.Errorf("%s/%s: %v, want the usage error %q", c.name, c.proto, err, c.err)
			}
			continue
		}
		if err != nil || port != c.port || proto != c.wantProto {
			t.Errorf("%s/%s: %d %s %v, want %d %s", c.name, c.proto, port, proto, err, c.port, c.wantProto)
		}
	}
	bare := &topology.Endpoint{Name: "b", Namespace: "x", Ports: []topology.Port{{Port: 80, Protocol: "TCP"}}}
	if _, _, err := namedPort(bare, "http", "TCP", false); err == nil || !strings.Contains(err.Error(), "x/b has no port of that name: it declares no named ports") {
		t.Errorf("no named ports: %v", err)
	}
}

// policy apply -f DIR reads the directory's *.yaml, *.yml and *.json
// files in name order, not its subdirectories, as kubectl apply -f DIR;
// files and - pass through; a directory without such files is an error.
func TestExpandFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.yaml", "a.yml", "c.json", "README.md", "sub/d.yaml", "e.yaml.orig"} {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := expandFiles([]string{"x.yaml", dir, "-"})
	want := []string{"x.yaml", filepath.Join(dir, "a.yml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "c.json"), "-"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v %v, want %v", got, err, want)
	}
	empty := filepath.Join(dir, "sub2")
	os.Mkdir(empty, 0o755)
	if _, err := expandFiles([]string{empty}); err == nil || err.Error() != empty+": a directory without *.yaml, *.yml or *.json files (subdirectories are not read)" {
		t.Errorf("empty directory: %v", err)
	}
	// A JSON document reads as YAML does (kubectl's -f takes both).
	js := `{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": "x"}, "spec": {"podSelector": {}}}`
	if ps, err := policy.Parse([]byte(js), "p.json"); err != nil || len(ps) != 1 || ps[0].Ref() != "NetworkPolicy x/p" {
		t.Errorf("json: %v %v", ps, err)
	}
}

// policy apply --dry-run prints the policies it would create, the
// compiled rules added and removed, and per host what each datapath's
// render would change, from the pure render the datapath applies.
func TestApplyPlanOutput(t *testing.T) {
	spec, err := topology.Parse([]byte(scenarios.Lab), "scenario lab", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	compile := func(yaml string) *policy.Compiled { return policytest.CompileOn(t, spec, yaml) }
	before := compile("")
	after := compile("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: web, namespace: x}\n" +
		"spec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from: [{podSelector: {matchLabels: {pod: b}}}]\n    ports: [{port: 80}]\n")
	for _, k := range []kind.Kind{kind.IPTables, kind.NFTables, kind.EBPF} {
		spec.Datapath = k
		var b strings.Builder
		pl := &lab.Plan{Change: &lab.Change{Created: []string{"NetworkPolicy x/web"}, Compiled: after}, Before: before, Spec: spec}
		if err := printApplyPlan(&b, pl); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out := b.String()
		for _, want := range []string{
			"NetworkPolicy x/web created (dry run)\n",
			"dry run: nothing applied; 1 rule over ",
			"(now 0 rules): 1 rule added, 0 rules removed\n",
			"  + 257 (x/a) ingress allow 256 (x/b) tcp/80  NetworkPolicy x/web spec.ingress[0]\n",
			"datapath " + string(k) + " would change:\n  host flip:\n",
			"  host flap: nothing\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in\n%s", k, want, out)
			}
		}
		// x/a (on flip) gets rules; flap has no endpoint the policy selects.
		if flip := out[strings.Index(out, "host flip:"):strings.Index(out, "host flap:")]; !strings.Contains(flip, map[kind.Kind]string{
			kind.IPTables: "chain CNLAB-FWD: +1 -0 rules\n", kind.NFTables: "set in_allow_x: new, 1 element\n", kind.EBPF: "endpoint x/a: +2 -1 policy map entries\n"}[k]) {
			t.Errorf("%s: host flip's changes:\n%s", k, flip)
		}
		// Nothing to change: every host says so.
		b.Reset()
		pl = &lab.Plan{Change: &lab.Change{Unchanged: []string{"NetworkPolicy x/web"}, Compiled: after}, Before: after, Spec: spec}
		if err := printApplyPlan(&b, pl); err != nil || !strings.Contains(b.String(), "host flip: nothing\n  host flap: nothing\n") {
			t.Errorf("%s: no change: %v\n%s", k, err, b.String())
		}
	}
}

// iptablesCounters are the packet and byte counters of iptables-save's
// chain lines ("[1:40]"), which traffic on the lab moves.
var iptablesCounters = regexp.MustCompile(`\[\d+:\d+\]`)

// kernelState is policy show --kernel without what changes by itself:
// iptables-save's time stamps and counters.
func kernelState(dump string) string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "# Generated by") || strings.HasPrefix(t, "# Completed on") {
			continue
		}
		out = append(out, iptablesCounters.ReplaceAllString(l, "[0:0]"))
	}
	return strings.Join(out, "\n")
}
