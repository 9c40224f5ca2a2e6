package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/observe"
)

// TestObserveUsage: bad flags are refused before anything is read.
func TestObserveUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"observe"}, "give the lab to observe"},
		{[]string{"observe", "l", "--verdict", "denied"}, `--verdict "denied"`},
		{[]string{"observe", "l", "--type", "flow"}, `--type "flow"`},
		{[]string{"observe", "l", "--protocol", "tcpp"}, `--protocol "tcpp"`},
		{[]string{"observe", "l", "--from", "nope"}, `--from "nope"`},
		{[]string{"observe", "l", "--port", "0"}, "--port 0"},
		{[]string{"observe", "l", "--since", "yesterday"}, `--since "yesterday"`},
		{[]string{"observe", "l", "--count", "1"}, "apply with --follow"},
		{[]string{"observe", "l", "--summary", "--follow"}, "--summary counts a window"},
		{[]string{"observe", "l", "-o", "yaml"}, "unknown output format"},
		{[]string{"probe", "l", "--explain", "--spoof"}, "--explain applies to the probe of every pair"},
		{[]string{"up", "--preset", "single-host", "--observe", "some"}, `--observe: "some"`},
	} {
		_, stderr, code := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 with %q", c.args, code, stderr, c.want)
		}
	}
}

// TestObserveCLI drives observe, monitor's alias, policy show --counters
// and probe --explain on an iptables lab recording drops, with a rule of
// the datapath deleted behind cnlab's back so that a cell differs from
// the model.
func TestObserveCLI(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy", "iptables")
	name := "t-obs-cli"
	examples := filepath.Join("..", "..", "examples")
	if _, stderr, code := runCLI(t, "up", "-f", filepath.Join(examples, "policy-lab.yaml"), "--name", name, "--datapath", "iptables", "--observe", "drops"); code != 0 {
		t.Fatalf("up: %s", stderr)
	}
	t.Cleanup(func() { runCLI(t, "down", name) })
	if _, stderr, code := runCLI(t, "policy", "apply", name, "-f", filepath.Join(examples, "policies", "web-from-front.yaml")); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	if _, stderr, code := runCLI(t, "probe", name, "--port", "80", "--expect"); code != 0 {
		t.Fatalf("probe: %s", stderr)
	}
	time.Sleep(300 * time.Millisecond)
	// The drops to y/a, as JSON: each names web-from-front's ingress.
	stdout, stderr, code := runCLI(t, "observe", name, "--verdict", "dropped", "--to", "y/a", "-o", "json", "--last", "0")
	if code != 0 {
		t.Fatalf("observe: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	// y/a accepts port 80 from namespace x only: y/b, y/c, z/a, z/b, z/c.
	if len(lines) < 5 {
		t.Fatalf("%d drops to y/a, want at least 5:\n%s", len(lines), stdout)
	}
	froms := map[string]bool{}
	for _, l := range lines {
		var f observe.Flow
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if f.To != "y/a" || f.Verdict != "dropped" || f.Datapath != "iptables" || f.Direction != "ingress" || f.Endpoint != "y/a" ||
			f.Policy == nil || f.Policy.Name != "web-from-front" || f.Policy.Namespace != "y" || f.Policy.Rule != "spec.ingress" || f.DstPort != 80 || f.Protocol != "tcp" {
			t.Errorf("flow %s", l)
		}
		froms[f.From] = true
	}
	for _, from := range []string{"y/b", "y/c", "z/a", "z/b", "z/c"} {
		if !froms[from] {
			t.Errorf("no drop from %s to y/a", from)
		}
	}
	// Filters: nothing from namespace x to y/a was dropped; no L7.
	if stdout, _, _ := runCLI(t, "observe", name, "--from", "x/", "--to", "y/a", "-o", "json"); strings.TrimSpace(stdout) != "" {
		t.Errorf("drops from x/ to y/a: %s", stdout)
	}
	// The summary counts them per policy rule.
	stdout, _, code = runCLI(t, "observe", name, "--summary", "-o", "json")
	var sum observe.Summary
	if err := json.Unmarshal([]byte(stdout), &sum); code != 0 || err != nil || sum.Flows < 5 || sum.Verdicts["dropped"] != sum.Flows || len(sum.Policies) == 0 {
		t.Errorf("summary: exit %d %v: %s", code, err, stdout)
	}
	// policy show --counters names the default deny of y/a's ingress.
	stdout, stderr, code = runCLI(t, "policy", "show", name, "--counters")
	if code != 0 || !strings.Contains(stdout, "default-deny ingress of y/a") {
		t.Errorf("policy show --counters: exit %d %s\n%s", code, stderr, stdout)
	}
	// follow and monitor's alias: wait for one drop while a probe runs.
	for _, args := range [][]string{
		{"observe", name, "--follow", "--verdict", "dropped", "--count", "1", "--duration", "20s"},
		{"monitor", name, "--type", "drop", "--count", "1", "--duration", "20s"},
	} {
		cmd := cnlab(args...)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// It follows the store from its end as of when it opens it.
		waitOpen(t, cmd.Process.Pid, filepath.Join(observe.Dir(name), "flows.jsonl"))
		time.Sleep(300 * time.Millisecond)
		runCLI(t, "probe", name, "--port", "80")
		sc := bufio.NewScanner(out)
		got := sc.Scan() && strings.Contains(sc.Text(), "DROPPED")
		if code := waitExit(t, cmd); code != 0 || !got {
			t.Errorf("%v: exit %d, first line %q", args, code, sc.Text())
		}
	}
	// A cell that differs from the model: x/a -> y/a is allowed, delete
	// the rule that accepts it from y/a's chain; --explain shows the
	// drop by y/a's default deny, which the model blames on the policy
	// isolating y/a.
	st, err := lab.ReadState(name)
	if err != nil {
		t.Fatal(err)
	}
	host := st.Spec.Host("flap") // y/a's
	save, err := netns.Run(context.Background(), host.Netns, nil, "iptables-legacy-save", "-t", "filter")
	if err != nil {
		t.Fatal(err)
	}
	// By its number in its chain (the comment's quotes would need a
	// shell to split the line).
	var chain string
	num, at := map[string]int{}, 0
	for _, l := range strings.Split(string(save), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		num[f[1]]++
		if strings.HasPrefix(f[1], "CNLAB-I-") && strings.Contains(l, "-s 10.0.192.10/32") && strings.Contains(l, "-j ACCEPT") {
			chain, at = f[1], num[f[1]]
		}
	}
	if chain == "" {
		t.Fatalf("no rule accepting x/a in y/a's chain:\n%s", save)
	}
	if _, err := netns.Run(context.Background(), host.Netns, nil, "iptables-legacy", "-w", "-D", chain, fmt.Sprint(at)); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runCLI(t, "probe", name, "--port", "80", "--explain", "-o", "json")
	if code != 1 {
		t.Fatalf("probe --explain: exit %d, want 1: %s", code, stderr)
	}
	var pv struct {
		Explain []struct {
			From, To string
			Flows    []observe.Flow
		}
	}
	if err := json.Unmarshal([]byte(stdout), &pv); err != nil {
		t.Fatal(err)
	}
	if len(pv.Explain) != 1 || pv.Explain[0].From != "x/a" || pv.Explain[0].To != "y/a" || len(pv.Explain[0].Flows) == 0 {
		t.Fatalf("explain: %+v", pv.Explain)
	}
	f := pv.Explain[0].Flows[0]
	if f.Verdict != "dropped" || f.Direction != "ingress" || f.Policy == nil || f.Policy.Name != "web-from-front" {
		t.Errorf("explained flow: %+v", f)
	}
	_, stderr, _ = runCLI(t, "probe", name, "--port", "80", "--explain")
	if !strings.Contains(stderr, "x/a -> y/a tcp/80, observed:") || !strings.Contains(stderr, "DROPPED") {
		t.Errorf("probe --explain text: %s", stderr)
	}
}
