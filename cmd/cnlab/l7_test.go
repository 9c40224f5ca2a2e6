package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/lab"
)

// TestL7CLI drives L7 policy as a user would, on nftables: the thesis's
// GET /public policy, probe --http --expect for an allowed and a denied
// request (the JSON contract: status and expectedStatus in every entry),
// trace --http, a monitor --l7 that catches a denied request, status
// naming the proxy, and down.
func TestL7CLI(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft", "nftables")
	// Two kinds, one per way of handing connections to the proxy
	// (netfilter's redirect, the eBPF programs'), as a user sees them.
	for _, dp := range []string{"nftables", "ebpf"} {
		t.Run(dp, func(t *testing.T) { l7CLI(t, dp) })
	}
}

func l7CLI(t *testing.T, dp string) {
	lab := "t-l7-cli-" + dp[:3]
	examples := filepath.Join("..", "..", "examples")
	if _, stderr, code := runCLI(t, "up", "-f", filepath.Join(examples, "policy-lab.yaml"), "--name", lab, "--datapath", dp); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", lab) })
	if _, stderr, code := runCLI(t, "policy", "apply", lab, "-f", filepath.Join(examples, "policies", "l7-get-public.yaml")); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	if _, stderr, code := runCLI(t, "probe", lab, "--port", "80", "--http", "GET /public", "--expect"); code != 0 {
		t.Errorf("probe --http GET /public --expect: exit %d: %s", code, stderr)
	}
	mon := cnlab("monitor", lab, "--l7", "--count", "1", "--duration", "20s", "-o", "json")
	var mout strings.Builder
	mon.Stdout = &mout
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	// The monitor follows the access logs from their end when it opens
	// them: probe once it has (it says nothing with -o json).
	waitFollowing(t, mon.Process.Pid, lab)
	stdout, stderr, code := runCLI(t, "probe", lab, "--port", "80", "--http", "GET /private", "--expect", "-o", "json")
	if code != 0 {
		t.Errorf("probe --http GET /private --expect: exit %d: %s", code, stderr)
	}
	var view struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &view); err != nil {
		t.Fatalf("probe -o json: %v\n%s", err, stdout)
	}
	status := map[string]float64{}
	for _, r := range view.Results {
		_, hasStatus := r["status"]
		_, hasExpected := r["expectedStatus"]
		if !hasStatus || !hasExpected {
			t.Fatalf("entry without status or expectedStatus: %v", r)
		}
		status[r["from"].(string)+">"+r["to"].(string)] = r["status"].(float64)
	}
	if len(view.Results) != 72 || status["x/c>x/a"] != 403 || status["x/b>x/a"] != 403 || status["y/b>x/a"] != 0 || status["x/a>x/c"] != 200 {
		t.Errorf("statuses: %d entries, x/c>x/a %v, x/b>x/a %v, y/b>x/a %v, x/a>x/c %v", len(view.Results),
			status["x/c>x/a"], status["x/b>x/a"], status["y/b>x/a"], status["x/a>x/c"])
	}
	if err := mon.Wait(); err != nil {
		t.Errorf("monitor --l7: %v", err)
	}
	var ev struct {
		Verdict, From, To, Method, Path string
		Status                          int
	}
	if err := json.Unmarshal([]byte(mout.String()), &ev); err != nil || ev.Verdict != "denied" || ev.Status != 403 || ev.To != "x/a" || ev.Path != "/private" {
		t.Errorf("monitor --l7 event %q: %+v %v", mout.String(), ev, err)
	}
	out, _, code := runCLI(t, "policy", "trace", lab, "--from", "x/c", "--to", "x/a", "--port", "80", "--http", "GET /private", "-o", "json")
	var tr struct {
		Status  int  `json:"status"`
		Allowed bool `json:"allowed"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &tr) != nil || tr.Status != 403 || !tr.Allowed {
		t.Errorf("trace --http: exit %d, %q", code, out)
	}
	if _, stderr, code := runCLI(t, "probe", lab, "--port", "80", "--header", "X: y"); code != 2 || !strings.Contains(stderr, "--header needs --http") {
		t.Errorf("--header without --http: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runCLI(t, "probe", lab, "--port", "80", "--http", "GET"); code != 2 || !strings.Contains(stderr, `want "METHOD PATH"`) {
		t.Errorf("--http GET: exit %d: %s", code, stderr)
	}
	if stdout, _, _ := runCLI(t, "status", lab); !strings.Contains(stdout, "L7 proxies: flip (pid ") {
		t.Errorf("status does not name the L7 proxy:\n%s", stdout)
	}
	if dp == "ebpf" {
		// x/a's entries that send x's endpoints to the proxy, and the
		// counter of the connections handed over.
		stdout, stderr, code := runCLI(t, "policy", "show", lab, "--kernel")
		if code != 0 || !strings.Contains(stdout, "L7 ports handed to the L7 proxy") || !strings.Contains(stdout, "to the L7 proxy)") ||
			!strings.Contains(stdout, "to-l7-proxy") {
			t.Errorf("policy show --kernel: exit %d %s\n%s", code, stderr, stdout)
		}
	}
}

// waitFollowing waits (up to 10 s) until process pid has every L7 access
// log of the lab open.
func waitFollowing(t *testing.T, pid int, name string) {
	t.Helper()
	st, err := lab.ReadState(name)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, h := range st.Spec.Hosts {
		if _, err := os.Stat(l7proxy.AccessLog(name, h.Name)); err == nil {
			logs = append(logs, l7proxy.AccessLog(name, h.Name))
		}
	}
	if len(logs) == 0 {
		t.Fatalf("lab %s has no L7 access log", name)
	}
	waitOpen(t, pid, logs...)
}

// waitOpen waits (up to 10 s) until process pid has every file of paths
// open: a follower (observe --follow, monitor) reads from the end of what
// it opened.
func waitOpen(t *testing.T, pid int, paths ...string) {
	t.Helper()
	var want []string
	for _, p := range paths {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		want = append(want, p)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		open := map[string]bool{}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if p, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
				open[p] = true
			}
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(p string) bool { return open[p] })
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d has not opened %v in 10 s", pid, missing)
		}
	}
}
