package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
)

// TestRunPlan: --plan needs no root and prints the points and the time
// the run would take, as a table or as JSON.
func TestRunPlan(t *testing.T) {
	stdout, stderr, code := runCLI(t, "run", "--plan")
	if code != 0 || !strings.Contains(stdout, "p0001") || !strings.Contains(stdout, "lab builds, about") {
		t.Fatalf("run --plan: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, _, code = runCLI(t, "run", "--plan", "-o", "json")
	var plan struct {
		Points           []results.Point
		Runs             int
		EstimatedSeconds float64
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &plan) != nil || len(plan.Points) == 0 || plan.Runs < len(plan.Points) || plan.EstimatedSeconds <= 0 {
		t.Errorf("run --plan -o json: exit %d: %s", code, stdout)
	}
}

// TestRunSIGINT interrupts `cnlab run` as Ctrl-C does once its first
// sample is in: it exits 130, keeps a valid partial results.json and
// leaves no lab behind.
func TestRunSIGINT(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	dir := t.TempDir()
	file := filepath.Join(dir, "exp.yaml")
	os.WriteFile(file, []byte("warmup: 0s\nduration: 1s\nrepetitions: 5\nworkloads: [{kind: tcp-stream}, {kind: tcp-rr}]\nmatrix: {datapath: [iptables, nftables]}\n"), 0o644)
	out := filepath.Join(dir, "out")
	cmd := cnlab("run", file, "--out", out, "--lab", "t-cli-run")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := results.Load(out)
		if err == nil && len(r.Points) > 0 && samples(r) > 0 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("no sample after 60 s: %s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Errorf("exit %d (%v), want %d; stderr:\n%s", code, err, exitInterrupted, stderr.String())
	}
	r, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if bad := r.Check(); len(bad) > 0 || r.Status != results.StatusInterrupted || samples(r) == 0 {
		t.Errorf("status %s, %d samples, problems %v", r.Status, samples(r), bad)
	}
	if !strings.Contains(stderr.String(), "interrupted") || !strings.Contains(stdout.String(), "results: "+out) {
		t.Errorf("stdout %q\nstderr %q", stdout.String(), stderr.String())
	}
	if labs, _ := lab.Labs(); contains(labs, "t-cli-run") {
		t.Error("the lab is still up after Ctrl-C")
	}
}

func samples(r *results.Results) int {
	n := 0
	for _, p := range r.Points {
		n += len(p.Samples)
	}
	return n
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestRunRefusesATakenLab: `cnlab run --lab NAME` with a lab NAME up exits
// 2 before the run starts and leaves that lab as it was.
func TestRunRefusesATakenLab(t *testing.T) {
	testutil.RequireRoot(t)
	name := "t-cli-taken"
	if _, stderr, code := runCLI(t, "up", "--preset", "single-host", "--name", name, "--datapath", "iptables"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", name) })
	dir := t.TempDir()
	file := filepath.Join(dir, "exp.yaml")
	os.WriteFile(file, []byte("warmup: 0s\nduration: 1s\nrepetitions: 1\nworkloads: [{kind: ping, count: 2}]\n"), 0o644)
	out := filepath.Join(dir, "out")
	_, stderr, code := runCLI(t, "run", file, "--out", out, "--lab", name)
	if code != 2 || !strings.Contains(stderr, "--lab: lab t-cli-taken is already up") {
		t.Errorf("exit %d, want 2: %s", code, stderr)
	}
	if strings.Contains(stderr, "running") || strings.Contains(stderr, "results in") {
		t.Errorf("said it runs before refusing: %s", stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "results.json")); err == nil {
		t.Error("the run started")
	}
	if labs, _ := lab.Labs(); !contains(labs, name) {
		t.Error("the lab the run did not build is gone")
	}
}
