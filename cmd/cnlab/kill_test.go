package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
)

// faultEnv names the fault point where a cnlab run by the tests kills
// itself: POINT or POINT:HOST (internal/fault lists the points). Only the
// test binary reads it.
const faultEnv = "CNLAB_FAULT"

// armFault makes this process SIGKILL itself at the point spec names.
func armFault(spec string) {
	if spec == "" {
		return
	}
	point, host, _ := strings.Cut(spec, ":")
	fault.SetHook(func(p, h string) error {
		if p == point && (host == "" || h == host) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		return nil
	})
}

// killLab: two hosts, two endpoints on each, one of each app per host.
const killLab = `name: %s
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wire}
endpoints:
  - {name: a1, host: flip, labels: {app: a}}
  - {name: b1, host: flip, labels: {app: b}}
  - {name: a2, host: flap, labels: {app: a}}
  - {name: b2, host: flap, labels: {app: b}}
`

// The policies: a receives only from b; b receives nothing; a also
// receives from a (the next apply after the killed command).
const (
	polAFromB = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-b, namespace: default}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress: [{from: [{podSelector: {matchLabels: {app: b}}}]}]
`
	polBClosed = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-closed, namespace: default}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Ingress]
`
	polAFromA = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-a, namespace: default}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: 80, protocol: TCP}]}]
`
)

// killPoints are where the killed command dies: every lab-wide point, and
// every per-host one on the first host (flip) and on the second (flap).
// The eBPF datapath also dies with its next generation built but not
// active, and between switching one host and the other.
func killPoints(dp string) []string {
	pts := []string{"locked", "staged"}
	hostPts := []string{"dirty", "kernel", "saved", "host-done"}
	switch dp {
	case "ebpf":
		hostPts = append([]string{"ebpf-staged", "ebpf-switch"}, hostPts...)
	case "iptables-ipsets":
		hostPts = []string{"dirty", "ipsets-written", "kernel", "saved", "host-done"}
	}
	for _, h := range []string{"flip", "flap"} {
		for _, p := range hostPts {
			pts = append(pts, p+":"+h)
		}
	}
	return append(pts, "applied")
}

// TestKilledApplyAndDelete kills `cnlab policy apply` and `cnlab policy
// delete` (SIGKILL, from inside the process) at every fault point on each
// datapath, then runs the next apply and `cnlab probe --expect`: the next
// apply must succeed, the stored set must be the one before the killed
// command or the one after it (never a mix) plus the next apply's policy,
// and every probed cell must match it, on both hosts.
func TestKilledApplyAndDelete(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	aFromB, bClosed, aFromA := write("a-from-b.yaml", polAFromB), write("b-closed.yaml", polBClosed), write("a-from-a.yaml", polAFromA)
	for _, dp := range []string{"iptables", "iptables-ipsets", "nftables", "ebpf"} {
		t.Run(dp, func(t *testing.T) {
			name := "t-kill-" + dp[:3]
			up := []string{"up", "--datapath", dp}
			if dp == "iptables-ipsets" {
				name, up = "t-kill-ips", []string{"up", "--datapath", "iptables", "--ipsets"}
			}
			topo := write(name+".yaml", strings.Replace(killLab, "%s", name, 1))
			if _, stderr, code := runCLI(t, append(up, "-f", topo)...); code != 0 {
				t.Fatalf("up: exit %d: %s", code, stderr)
			}
			t.Cleanup(func() { runCLI(t, "down", name) })
			for _, op := range []string{"apply", "delete"} {
				for _, pt := range killPoints(dp) {
					// apply: {a-from-b} -> killed apply of b-closed.
					// delete: {a-from-b, b-closed} -> killed delete of b-closed.
					before := []string{"a-from-b"}
					killed := []string{"policy", "apply", name, "-f", bClosed}
					after := []string{"a-from-b", "b-closed"}
					if op == "delete" {
						before, after = after, before
						killed = []string{"policy", "delete", name, "b-closed"}
					}
					mustCLI(t, "policy", "delete", name, "--all")
					mustCLI(t, "policy", "apply", name, "-f", aFromB)
					if slices.Contains(before, "b-closed") {
						mustCLI(t, "policy", "apply", name, "-f", bClosed)
					}
					cmd := cnlab(killed...)
					cmd.Env = append(cmd.Env, faultEnv+"="+pt)
					out, err := cmd.CombinedOutput()
					var ee *exec.ExitError
					if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
						t.Fatalf("%s killed at %s: not killed (%v): %s", op, pt, err, out)
					}
					mustCLI(t, "policy", "apply", name, "-f", aFromA)
					pols, err := lab.Policies(name)
					if err != nil {
						t.Fatal(err)
					}
					var have []string
					for _, p := range pols {
						have = append(have, p.Name)
					}
					slices.Sort(have)
					if w1, w2 := withAFromA(before), withAFromA(after); !slices.Equal(have, w1) && !slices.Equal(have, w2) {
						t.Errorf("%s killed at %s, then an apply: stored %v, want %v or %v", op, pt, have, w1, w2)
					}
					if stdout, stderr, code := runCLI(t, "probe", name, "--expect", "--timeout", "300ms"); code != 0 {
						t.Errorf("%s killed at %s, then an apply: probe --expect exit %d:\n%s%s", op, pt, code, stdout, stderr)
					}
				}
			}
		})
	}
}

func withAFromA(names []string) []string {
	out := append([]string{"a-from-a"}, names...)
	slices.Sort(out)
	return out
}

func mustCLI(t *testing.T, args ...string) {
	t.Helper()
	if stdout, stderr, code := runCLI(t, args...); code != 0 {
		t.Fatalf("cnlab %s: exit %d: %s%s", strings.Join(args, " "), code, stdout, stderr)
	}
}
