package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// observeLab brings up the scenario lab on dp recording at level.
func observeLab(t *testing.T, name, dp, level string) *topology.Spec {
	t.Helper()
	testutil.RequireRoot(t)
	spec, err := topology.Parse([]byte(scenarios.Lab), "scenario lab", topology.Overrides{Name: name, Datapath: dp, Observe: level})
	if err != nil {
		t.Fatal(err)
	}
	if err := Up(context.Background(), spec, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pid := recorderPidOf(spec.Name)
		var nf *topology.NotFoundError
		if err := Down(spec.Name, nil); err != nil && !errors.As(err, &nf) {
			t.Errorf("down: %v", err)
		}
		if pid > 0 && unix.Kill(pid, 0) == nil {
			t.Errorf("the recorder (pid %d) outlived down", pid)
		}
	})
	return spec
}

// flowsSince reads the lab's flows since t once the recorder wrote them:
// 300 ms after the traffic at least (the recorder flushes every 100 ms,
// reading the events as they come), then, as long as complete says some
// are missing (nil: none), again every 100 ms up to 5 s, for a recorder
// that a busy machine held up.
func flowsSince(t *testing.T, lab string, since time.Time, complete func([]*observe.Flow) bool) []*observe.Flow {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		var out []*observe.Flow
		var lost []*observe.Lost
		flt := observe.Filter{Since: since}
		if _, err := observe.Read(lab, func(r observe.Record) error {
			if r.Lost != nil {
				lost = append(lost, r.Lost)
			}
			if r.Flow != nil && flt.Match(r.Flow) {
				out = append(out, r.Flow)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if complete == nil || complete(out) || time.Now().After(deadline) {
			for _, l := range lost {
				t.Errorf("the recorder lost %d events (%s on %s)", l.Lost, l.Source, l.Host)
			}
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wantPolicy is the rule the model says decided a side, as flows name it.
func wantPolicy(s policy.Side, dir string) string {
	switch {
	case s.Rule != "":
		return observe.ParseOrigin(s.Rule).String()
	case !s.Allowed && len(s.SelectedBy) > 0:
		return observe.ParseOrigin(s.SelectedBy[0] + " spec." + dir).String()
	}
	return ""
}

// TestObserveScenarios checks every datapath's flows against the policy
// model on a share of the scenario table, recording everything (observe:
// all): every probe cell the model denies has a dropped flow at the side
// that denies it, naming the rule (or the isolating policy) the model
// says decided, and no forwarded flow past that side; every cell it
// allows has a forwarded flow and no drop by policy.
func TestObserveScenarios(t *testing.T) {
	for _, dp := range kind.All() {
		if kind.Get(dp).MayRefuse {
			continue
		}
		t.Run(string(dp), func(t *testing.T) {
			spec := observeLab(t, "t-obs-"+shortName(string(dp)), string(dp), topology.ObserveAll)
			ctx := context.Background()
			for i, sc := range scenarios.All {
				if i%5 != 0 && !strings.Contains(sc.Name, "deny") {
					continue
				}
				if _, err := Delete(ctx, spec.Name, nil, true, ""); err != nil {
					t.Fatal(err)
				}
				var pols []*policy.Policy
				if sc.Policies != "" {
					pols = mustParse(t, sc.Policies)
					if _, err := Apply(ctx, spec.Name, pols); err != nil {
						t.Fatalf("%s: apply: %v", sc.Name, err)
					}
				}
				m, err := policy.NewModel(spec, pols)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				cells, err := probe.Run(ctx, spec, []probe.Target{{Protocol: "TCP", Port: 80}, {Protocol: "UDP", Port: 81}}, probe.Options{Timeout: 750 * time.Millisecond})
				if err != nil {
					t.Fatalf("%s: probe: %v", sc.Name, err)
				}
				flows := flowsSince(t, spec.Name, start, func(fs []*observe.Flow) bool { return len(flowProblems(spec, m, cells, fs)) == 0 })
				checkFlows(t, sc.Name, flowProblems(spec, m, cells, flows))
			}
		})
	}
}

// checkFlows reports the problems flowProblems found, the first eight.
func checkFlows(t *testing.T, name string, problems []string) {
	t.Helper()
	for i, p := range problems {
		if i == 8 {
			t.Errorf("%s: %d problems in all", name, len(problems))
			break
		}
		t.Errorf("%s: %s", name, p)
	}
}

// flowProblems compares the flows with the probe's cells and the model.
func flowProblems(spec *topology.Spec, m *policy.Model, cells []probe.Cell, flows []*observe.Flow) []string {
	type key struct{ from, to, proto string }
	byCell := map[key][]*observe.Flow{}
	for _, f := range flows {
		byCell[key{f.From, f.To, f.Protocol}] = append(byCell[key{f.From, f.To, f.Protocol}], f)
	}
	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	for _, c := range cells {
		src, _ := spec.Endpoint(c.From)
		dst, _ := spec.Endpoint(c.To)
		v := m.Verdict(src, dst, c.Protocol, c.Port)
		if c.Allowed != v.Allowed {
			fail("%s -> %s %s/%d: probed %v, model %v (a datapath bug, not observe's)", c.From, c.To, c.Protocol, c.Port, c.Allowed, v.Allowed)
			continue
		}
		var fs []*observe.Flow
		for _, f := range byCell[key{c.From, c.To, strings.ToLower(c.Protocol)}] {
			if int(f.DstPort) == c.Port {
				fs = append(fs, f)
			}
		}
		cell := fmt.Sprintf("%s -> %s %s/%d", c.From, c.To, c.Protocol, c.Port)
		if v.Allowed {
			fwd := false
			for _, f := range fs {
				if f.Verdict == observe.Dropped {
					fail("%s: allowed, but a flow says dropped: %s", cell, observe.Line(f))
				}
				fwd = fwd || f.Verdict == observe.Forwarded
			}
			if !fwd {
				fail("%s: allowed, but no forwarded flow (%d flows)", cell, len(fs))
			}
			continue
		}
		dir, side := "egress", v.Egress
		if v.Egress.Allowed {
			dir, side = "ingress", v.Ingress
		}
		want := wantPolicy(side, dir)
		var drops []string
		ok := false
		for _, f := range fs {
			if f.Verdict != observe.Dropped {
				if f.Direction == dir {
					fail("%s: denied at %s, but forwarded there: %s", cell, dir, observe.Line(f))
				}
				continue
			}
			got := ""
			if f.Policy != nil {
				got = f.Policy.String()
			}
			drops = append(drops, observe.Line(f))
			if f.Direction == dir && f.Reason == observe.ReasonPolicyDenied && got == want {
				ok = true
			}
		}
		if !ok {
			fail("%s: denied at %s by %q; flows: %q", cell, dir, want, drops)
		}
	}
	return problems
}

// TestObserveLevels changes a running lab's level drops -> all -> off:
// drops records no forwarded flow, all does, off stops the recorder and
// (netfilter) removes the log rules: the kernel state is the one of a lab
// that never recorded.
func TestObserveLevels(t *testing.T) {
	for _, dp := range kind.All() {
		if kind.Get(dp).MayRefuse {
			continue
		}
		t.Run(string(dp), func(t *testing.T) {
			spec := observeLab(t, "t-obl-"+shortName(string(dp)), string(dp), "")
			ctx := context.Background()
			before, err := Describe(ctx, spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			if RecorderRunning(spec.Name) {
				t.Fatal("a recorder runs on a lab with observe off")
			}
			pols := mustParse(t, scenarios.Named("deny all ingress in x").Policies)
			if _, err := Apply(ctx, spec.Name, pols); err != nil {
				t.Fatal(err)
			}
			for _, level := range []string{topology.ObserveDrops, topology.ObserveAll} {
				if _, err := SetObserve(ctx, spec.Name, level); err != nil {
					t.Fatalf("observe %s: %v", level, err)
				}
				start := time.Now()
				if _, err := probe.Run(ctx, spec, []probe.Target{{Protocol: "TCP", Port: 80}}, probe.Options{Timeout: 500 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				n := map[string]int{}
				// Read until the flows the level records arrived; a
				// forwarded flow at level drops has the 300 ms the
				// reading waits at least to show.
				recorded := func(fs []*observe.Flow) bool {
					drop, fwd := false, false
					for _, f := range fs {
						drop = drop || f.Verdict == observe.Dropped
						fwd = fwd || f.Verdict == observe.Forwarded
					}
					return drop && (fwd || level != topology.ObserveAll)
				}
				for _, f := range flowsSince(t, spec.Name, start, recorded) {
					n[f.Verdict]++
				}
				if n[observe.Dropped] == 0 {
					t.Errorf("observe %s: no drop recorded", level)
				}
				if (n[observe.Forwarded] > 0) != (level == topology.ObserveAll) {
					t.Errorf("observe %s: %d forwarded flows recorded", level, n[observe.Forwarded])
				}
			}
			if _, err := Delete(ctx, spec.Name, nil, true, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := SetObserve(ctx, spec.Name, topology.ObserveOff); err != nil {
				t.Fatal(err)
			}
			if RecorderRunning(spec.Name) {
				t.Error("the recorder still runs after observe off")
			}
			if _, err := os.Stat(filepath.Join(observe.Dir(spec.Name), recorderPid)); err == nil {
				t.Error("the recorder's pid file is left after observe off")
			}
			after, err := Describe(ctx, spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			for h := range before {
				// eBPF has no log rules (the recorder's lease asks the
				// programs for events), and its description counts
				// packets: compare netfilter's rules only.
				if dp != kind.EBPF && noComments(before[h]) != noComments(after[h]) {
					t.Errorf("host %s: the datapath's state after drops -> all -> off differs from before:\n%s\n---\n%s", h, before[h], after[h])
				}
			}
		})
	}
}

// noComments drops what a description says of time and traffic: the
// comment lines (iptables-save's "# Generated ... on DATE") and nft's
// counter values (a probe's last packets may pass after the rebuild).
func noComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, counterValues.ReplaceAllString(l, "counter"))
		}
	}
	return strings.Join(out, "\n")
}

var counterValues = regexp.MustCompile(`counter packets [0-9]+ bytes [0-9]+`)
