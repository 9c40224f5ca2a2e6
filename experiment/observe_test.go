package experiment

import (
	"context"
	"errors"
	mrand "math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/topology"
)

// TestObserveAxis: observe: [off, drops, all] gives each point's lab its
// level, one lab for the levels (changed with lab.SetObserve between
// points), the level in the point's words; bad values, chains and the
// kubernetes backend are refused naming the file, the key and the value.
func TestObserveAxis(t *testing.T) {
	pts := mustPoints(t, "workloads: [{kind: tcp-crr}]\nmatrix: {datapath: [iptables, ebpf], observe: [off, drops, all]}\n", false)
	if len(pts) != 6 {
		t.Fatalf("%d points, want 6", len(pts))
	}
	s, err := Parse([]byte("workloads: [{kind: tcp-crr}]\n"), "x.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, p := range pts {
		spec, err := s.labSpec(p.Params, "h-obsexp")
		if err != nil {
			t.Fatal(err)
		}
		if spec.ObserveLevel() != p.Params.Observe {
			t.Errorf("%s: lab observe %s, want %s", p.ID, spec.ObserveLevel(), p.Params.Observe)
		}
		if want := "observe=" + p.Params.Observe; !strings.Contains(p.Params.Text(), want) {
			t.Errorf("%s: text %q lacks %q", p.ID, p.Params.Text(), want)
		}
		if p.Series != series(results.Params{Datapath: p.Params.Datapath, PolicyMode: p.Params.PolicyMode}) {
			t.Errorf("%s: series %q: the level names lines in the report, not the series", p.ID, p.Series)
		}
		keys[labKey(p.Params)] = true
	}
	if len(keys) != 2 {
		t.Errorf("%d labs for 6 points, want one per datapath", len(keys))
	}
	// Unset: the topology's own level (off for a preset), in a lab of
	// its own.
	pts = mustPoints(t, "workloads: [{kind: tcp-crr}]\nmatrix: {datapath: [iptables]}\n", false)
	if spec, err := s.labSpec(pts[0].Params, "h-obsexp"); err != nil || spec.ObserveLevel() != topology.ObserveOff {
		t.Errorf("no observe key: %v, %v", spec, err)
	}
	if keys[labKey(pts[0].Params)] {
		t.Error("a point without observe shares a lab with points that set it")
	}

	base := "workloads: [{kind: tcp-rr}]\n"
	for _, c := range []struct{ text, want string }{
		{base + "matrix: {observe: [off, verbose]}\n", `x.yaml: matrix.observe[1]: "verbose": give off, drops or all`},
		{base + "sweeps: [{name: a, matrix: {observe: [on]}}]\n", `x.yaml: sweeps[0].matrix.observe[0]: "on": give off, drops or all`},
		{base + "matrix: {topology: [chain], observe: [drops]}\n", "x.yaml: matrix.observe: drops: a chain has no policy datapath to observe"},
		{base + "matrix: {observe: [1]}\n", "x.yaml: matrix.observe"},
	} {
		if _, err := Parse([]byte(c.text), "x.yaml", false); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.text, err, c.want)
		}
	}
	// A chain with observe off is a chain without it.
	if _, err := Parse([]byte(base+"matrix: {topology: [chain], observe: [off]}\n"), "x.yaml", false); err != nil {
		t.Errorf("chain, observe off: %v", err)
	}
	_, err = ParseFor([]byte(base+"matrix: {observe: [off, all]}\n"), "x.yaml", false, results.BackendKubernetes)
	if want := "x.yaml: matrix.observe: cannot apply with --backend kubernetes: flow visibility on a cluster is its CNI's"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("kubernetes: error %v, want %q", err, want)
	}
}

// TestPolicyCounters: a point's per-rule counters are what each rule
// counted during its samples, summed over hosts and samples; a rule
// whose counters restarted counts from zero; a failed reading records
// nothing for that sample.
func TestPolicyCounters(t *testing.T) {
	const rule = "NetworkPolicy default/allow spec.ingress[0]"
	allow := func(host string, pk uint64) datapath.RuleCounter {
		return datapath.RuleCounter{Host: host, Endpoint: "default/server", Direction: "ingress", Rule: rule, Verdict: "allow", Packets: pk, Bytes: 60 * pk}
	}
	deny := func(host string, pk uint64) datapath.RuleCounter {
		return datapath.RuleCounter{Host: host, Endpoint: "default/server", Direction: "ingress", Rule: datapath.DefaultDenyRule, Verdict: "default-deny", Packets: pk, Bytes: 60 * pk}
	}
	readings := [][]datapath.RuleCounter{
		{allow("h1", 10), allow("h2", 5), deny("h1", 1)},
		{allow("h1", 30), allow("h2", 5), deny("h1", 1)}, // sample 1: 20 allowed
		{allow("h1", 4), allow("h2", 5), deny("h1", 3)},  // applied again: h1 restarted
		{allow("h1", 6), allow("h2", 5), deny("h1", 3)},  // sample 2: 2 allowed
	}
	n := 0
	read := func(context.Context) ([]results.PolicyCounter, error) {
		if n >= len(readings) {
			return nil, errors.New("gone")
		}
		n++
		return policyCountersOf(readings[n-1]), nil
	}
	pr := &results.PointResult{}
	var log strings.Builder
	for range 2 {
		if err := countPolicies(context.Background(), read, pr, &log, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	want := []results.PolicyCounter{
		{Rule: rule, Verdict: "allow", Packets: 22, Bytes: 60 * 22},
		{Rule: "default-deny ingress of default/server", Verdict: "default-deny", Packets: 0, Bytes: 0},
	}
	if !reflect.DeepEqual(pr.PolicyCounters, want) {
		t.Errorf("counters %+v, want %+v", pr.PolicyCounters, want)
	}
	if d := policyCounterDelta(policyCountersOf(readings[1]), policyCountersOf(readings[2])); d[0].Packets != 9 {
		t.Errorf("after a restart: %+v, want the allow rule's 9 packets from zero", d)
	}
	// A reading that fails: the sample is measured, nothing is added.
	if err := countPolicies(context.Background(), read, pr, &log, func() error { return nil }); err != nil || !reflect.DeepEqual(pr.PolicyCounters, want) || !strings.Contains(log.String(), "gone") {
		t.Errorf("failed reading: %v %+v %q", err, pr.PolicyCounters, log.String())
	}
	// No reader (a datapath that does not count per rule): nothing.
	pr = &results.PointResult{}
	if err := countPolicies(context.Background(), nil, pr, &log, func() error { return nil }); err != nil || pr.PolicyCounters != nil {
		t.Errorf("no reader: %v %+v", err, pr.PolicyCounters)
	}
	if policyCounterReader(&topology.Spec{Datapath: kind.None}) != nil {
		t.Error("a lab without a datapath has a counter reader")
	}
}

// TestCostFigureKeys: a sweep's figures.cost names an axis whose values
// name lines, one of its values, and a labelled range.
func TestCostFigureKeys(t *testing.T) {
	base := "workloads: [{kind: tcp-rr}]\nsweeps: [{name: a, matrix: {observe: [\"off\", all]}, figures: {cost: "
	for _, c := range []struct{ cost, want string }{
		{`{axis: colour, base: x}`, `x.yaml: sweeps[0].figures.cost.axis: "colour": an axis whose values name lines, one of`},
		{`{axis: policies, base: "0"}`, `x.yaml: sweeps[0].figures.cost.axis: "policies": an axis whose values name lines`},
		{`{axis: observe}`, "x.yaml: sweeps[0].figures.cost.base: the value of observe the others are measured against"},
		{`{axis: observe, base: none}`, `x.yaml: sweeps[0].figures.cost.base: "none": give off, drops or all`},
		{`{axis: observe, base: "off", reference: {from: 15, to: 1, label: s}}`, "x.yaml: sweeps[0].figures.cost.reference: from 15 to 1: a range"},
		{`{axis: observe, base: "off", reference: {from: 1, to: 15}}`, "x.yaml: sweeps[0].figures.cost.reference.label: who reported the range"},
		{`{axis: observe, base: "off", colour: red}`, "x.yaml: sweeps[0].figures.cost.colour"},
	} {
		if _, err := Parse([]byte(base+c.cost+"}}]\n"), "x.yaml", false); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.cost, err, c.want)
		}
	}
	if _, err := Parse([]byte(base+`{axis: observe, base: "off", reference: {from: 1, to: 15, label: "seed 003"}}}}]`+"\n"), "x.yaml", false); err != nil {
		t.Errorf("a good cost: %v", err)
	}
}

// TestObserveSchedule: in a round, a lab's points at one observe level
// run together, so the level changes at most twice per lab and round.
func TestObserveSchedule(t *testing.T) {
	pts := mustPoints(t, "workloads: [{kind: tcp-stream}, {kind: tcp-rr}, {kind: tcp-crr}]\nmatrix: {datapath: [iptables, ebpf], observe: [\"off\", drops, all]}\n", false)
	byID := map[string]results.Point{}
	for _, p := range pts {
		byID[p.ID] = p
	}
	for seed := range int64(20) {
		jobs := schedule(pts, 1, mrand.New(mrand.NewSource(seed)))
		changes := 0
		for i := 1; i < len(jobs); i++ {
			a, b := byID[jobs[i-1].Point].Params, byID[jobs[i].Point].Params
			if labKey(a) == labKey(b) && jobs[i-1].Repetition == jobs[i].Repetition && a.Observe != b.Observe {
				changes++
			}
		}
		if want := 2 * pts[0].Repetitions * 2; changes != want { // 2 labs, a round a repetition, 2 changes each
			t.Errorf("seed %d: %d level changes, want %d", seed, changes, want)
		}
	}
}
