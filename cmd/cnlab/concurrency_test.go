package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/topology"
)

// TestDownDuringProbeAndExec: `down` while a probe waits on a deny-all
// lab and a command runs in an endpoint. Down succeeds at once, both are
// ended (down kills what holds the lab's namespaces), and nothing of the
// lab is left (TestMain checks the kernel).
func TestDownDuringProbeAndExec(t *testing.T) {
	testutil.RequireRoot(t)
	const lab = "t-cli-conc"
	if _, stderr, code := runCLI(t, "up", "--preset", "single-host", "--name", lab); code != 0 {
		t.Fatalf("up: exit %d: %s", code, stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", lab) })
	apply := cnlab("policy", "apply", lab, "-f", "-")
	apply.Stdin = strings.NewReader(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress]}
`)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("apply: %v: %s", err, out)
	}
	probe := cnlab("probe", lab, "--port", "80", "--timeout", "20s")
	sleep := cnlab("exec", lab, "server", "--", "sleep", "60")
	for _, c := range []*exec.Cmd{probe, sleep} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill() })
	}
	time.Sleep(time.Second) // the probe's listeners are up, its connects waiting
	t0 := time.Now()
	if _, stderr, code := runCLI(t, "down", lab); code != 0 {
		t.Fatalf("down during probe and exec: exit %d: %s", code, stderr)
	}
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("down took %v", d)
	}
	for _, c := range []*exec.Cmd{probe, sleep} {
		if code := waitExit(t, c); code == 0 {
			t.Errorf("%v exited 0 although its lab went down under it", c.Args[1:])
		}
	}
	if names, _ := topology.Netns(lab); len(names) != 0 {
		t.Errorf("left: %v", names)
	}
}
