package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/internal/testutil"
)

// TestEBPFCLI drives the eBPF datapath as a user would: up, apply, probe
// --expect, a monitor that catches a denied probe's drop, the kernel view,
// and down leaving no pins.
func TestEBPFCLI(t *testing.T) {
	testutil.RequireRoot(t)
	lab := "t-ebpf-cli"
	examples := filepath.Join("..", "..", "examples")
	if _, stderr, code := runCLI(t, "up", "-f", filepath.Join(examples, "policy-lab.yaml"), "--name", lab, "--datapath", "ebpf"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			runCLI(t, "down", lab)
		}
	})
	if _, stderr, code := runCLI(t, "policy", "apply", lab, "-f", filepath.Join(examples, "policies", "web-from-front.yaml")); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	// A monitor waiting for one drop, as JSON, while the probe runs.
	mon := cnlab("monitor", lab, "--count", "1", "--duration", "20s", "-o", "json")
	var out strings.Builder
	mon.Stdout = &out
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, stderr, code := runCLI(t, "probe", lab, "--port", "80", "--expect"); code != 0 {
		t.Errorf("probe --expect: exit %d: %s", code, stderr)
	}
	if err := mon.Wait(); err != nil {
		t.Fatalf("monitor: %v", err)
	}
	var ev struct {
		Verdict, Reason, From, To, Protocol, Dst string
	}
	if err := json.Unmarshal([]byte(out.String()), &ev); err != nil {
		t.Fatalf("monitor output %q: %v", out.String(), err)
	}
	if ev.Verdict != "dropped" || ev.Reason != "policy-default-deny" || ev.Protocol != "tcp" || !strings.HasSuffix(ev.Dst, ":80") || ev.From == "" || ev.To == "" {
		t.Errorf("monitor event %+v", ev)
	}
	if stdout, _, _ := runCLI(t, "status", lab); !strings.Contains(stdout, "datapath ebpf (host routing bpf)") {
		t.Errorf("status does not show the eBPF options:\n%s", stdout)
	}
	stdout, stderr, code := runCLI(t, "policy", "show", lab, "--kernel")
	if code != 0 || !strings.Contains(stdout, "host routing bpf") || !strings.Contains(stdout, "policy entries") {
		t.Errorf("policy show --kernel: %d %s %s", code, stdout, stderr)
	}
	if _, stderr, code := runCLI(t, "down", lab); code != 0 {
		t.Fatalf("down: %s", stderr)
	}
	downed = true
	if _, err := os.Stat(filepath.Join(ebpf.PinRoot, lab)); !os.IsNotExist(err) {
		t.Errorf("pins left after down: %v", err)
	}
	if out, _ := exec.Command("bpftool", "link", "show").CombinedOutput(); strings.Contains(string(out), "cnlab_from_ep") {
		t.Errorf("links left after down:\n%s", out)
	}
}

// TestMonitorNeedsEBPF: monitor on a lab of another datapath is bad input.
func TestMonitorNeedsEBPF(t *testing.T) {
	testutil.RequireRoot(t)
	lab := "t-mon-ipt"
	if _, stderr, code := runCLI(t, "up", "--preset", "single-host", "--name", lab, "--datapath", "nftables"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", lab) })
	_, stderr, code := runCLI(t, "monitor", lab)
	if code != 2 || !strings.Contains(stderr, "lab t-mon-ipt uses the nftables datapath") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}
