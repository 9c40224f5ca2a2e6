package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/plural"
)

// Schema is the version of results.json; a reader refuses another.
const Schema = 1

// Backends: where a run's points are measured (Results.Backend).
const (
	BackendLab        = "lab"        // namespaces on this machine (the default)
	BackendKubernetes = "kubernetes" // agent pods on a cluster (package kube)
)

// Run states.
const (
	StatusRunning     = "running"
	StatusComplete    = "complete"
	StatusInterrupted = "interrupted"
	StatusFailed      = "failed"
)

// Point states.
const (
	PointPending = "pending" // not run (yet, or the run was interrupted first)
	PointDone    = "done"    // every repetition measured
	PointPartial = "partial" // some repetitions measured, the run stopped
	PointFailed  = "failed"  // a repetition failed: see Error
)

// Results is results.json: everything a report needs, and the experiment
// as given so the run can be repeated.
type Results struct {
	Schema     int            `json:"schema"`
	Cnlab      string         `json:"cnlab"` // commit of the cnlab that ran it
	Experiment ExperimentInfo `json:"experiment"`
	Seed       int64          `json:"seed"`
	Lab        string         `json:"lab"`
	// Backend is where the points were measured: "lab" (this machine's
	// namespaces) or "kubernetes" (a cluster: environment.json's cluster
	// block says which). Runs from before it was recorded are labs.
	Backend string `json:"backend,omitempty"`
	// Cluster is what the kubernetes backend detected: the CNI,
	// kube-proxy mode and nodes' system info (environment.json has it too).
	Cluster    *ClusterInfo  `json:"cluster,omitempty"`
	StartedAt  time.Time     `json:"startedAt"`
	FinishedAt *time.Time    `json:"finishedAt,omitempty"`
	Status     string        `json:"status"`
	Error      string        `json:"error,omitempty"`
	Order      []Job         `json:"order"`  // the shuffled schedule
	Builds     []Build       `json:"builds"` // every lab built, in order
	Points     []PointResult `json:"points"`
}

// ExperimentInfo is the experiment file as given and as parsed.
type ExperimentInfo struct {
	File  string `json:"file"`
	Name  string `json:"name"`
	Quick bool   `json:"quick"`
	Text  string `json:"text"` // the file's bytes
	Spec  *Spec  `json:"spec"`
	// Flags are the command-line flags that changed the file (`cnlab run
	// --repetitions 5 ...`): Spec holds the result.
	Flags []string `json:"flags,omitempty"`
}

// Job is one repetition of one point in the schedule. Repetition -1 is
// the extra, unmeasured run of a point with profile: true.
type Job struct {
	Point      string `json:"point"`
	Repetition int    `json:"repetition"`
}

// Build is one lab built during the run, with what it cost.
type Build struct {
	Key          string         `json:"key"`
	Params       Params         `json:"params"`
	At           time.Time      `json:"at"`
	UpSeconds    float64        `json:"upSeconds"`
	MTU          int            `json:"mtu"`
	Offloads     string         `json:"offloads,omitempty"` // as the matrix set them (empty: as built)
	Error        string         `json:"error,omitempty"`
	PolicyApply  []Apply        `json:"policyApply,omitempty"`
	ServiceApply []ServiceApply `json:"serviceApply,omitempty"`
	// ObserveApply are the changes of the lab's observe level between
	// its points (lab.SetObserve).
	ObserveApply []ObserveApply `json:"observeApply,omitempty"`
	TeardownSecs float64        `json:"teardownSeconds"`
	// Nodes are the cluster nodes of the endpoints (by ID), when the
	// kubernetes backend deployed them.
	Nodes map[string]string `json:"nodes,omitempty"`
	// Namespaces are the cluster namespaces cnlab created for the
	// topology's (the kubernetes backend; policies are rewritten to them).
	Namespaces map[string]string `json:"namespaces,omitempty"`
}

// ObserveApply is one change of a running lab's observe level: its
// datapath applied again for the level, its recorder started or stopped.
type ObserveApply struct {
	Level   string  `json:"level"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// Apply is one policy update of a lab.
type Apply struct {
	Policies   int     `json:"policies"`
	PolicyMode string  `json:"policyMode"`
	L7Mode     string  `json:"l7Mode,omitempty"` // an L7 point's policy
	L7Rules    int     `json:"l7Rules,omitempty"`
	L7Match    string  `json:"l7Match,omitempty"`
	Seconds    float64 `json:"seconds"`
	Error      string  `json:"error,omitempty"`
	// ClusterPolicies and ClusterPolicyMatch: the point's cluster
	// policies, applied in the same update.
	ClusterPolicies    int    `json:"clusterPolicies,omitempty"`
	ClusterPolicyMatch string `json:"clusterPolicyMatch,omitempty"`
	// On a cluster: whether the probe saw the policies enforced as the
	// model says, how long after the apply began, and what differed
	// when it did not.
	// ChangedCells counts the probe's connections whose verdict the
	// apply changed; EnforcedSeconds is set only when some did (otherwise
	// the old policies would pass the probe as well).
	Enforced        *bool   `json:"enforced,omitempty"`
	EnforcedSeconds float64 `json:"enforcedSeconds,omitempty"`
	ChangedCells    int     `json:"changedCells,omitempty"`
	Mismatch        string  `json:"mismatch,omitempty"`
}

// ServiceApply is one replacement of a lab's Services (the whole set: N
// Services of B backends), as `cnlab service apply` makes it: reading the
// stored set, resolving the new one, the proxy's update on every host,
// storing it.
type ServiceApply struct {
	Services int     `json:"services"`
	Backends int     `json:"backends"`
	Seconds  float64 `json:"seconds"`
	Error    string  `json:"error,omitempty"`
	// ReadySeconds, on a cluster: from the apply until the measured
	// Service answered the client.
	ReadySeconds float64 `json:"readySeconds,omitempty"`
}

// PointResult is a point with its samples and their summaries.
type PointResult struct {
	Point
	Status  string             `json:"status"`
	Error   string             `json:"error,omitempty"`
	Samples []Sample           `json:"samples"`
	Summary map[string]Summary `json:"summary"`
	Prof    *ProfileResult     `json:"profileResult,omitempty"`
	// Reached says how close a point with a precision target came.
	Reached *PrecisionResult `json:"precisionResult,omitempty"`
	// Nodes are the cluster nodes its client and server ran on (the
	// kubernetes backend), by endpoint ID.
	Nodes map[string]string `json:"nodes,omitempty"`
	// PolicyCounters are what the lab's datapath counted per policy rule
	// during the point's measured samples (summed over its samples, its
	// hosts and endpoints), when the datapath counts per rule (none
	// otherwise).
	PolicyCounters []PolicyCounter `json:"policyCounters,omitempty"`
}

// PolicyCounter is one policy rule of a lab's datapath and what it
// decided during a point's samples, like iptables -v: the new flows it
// allowed, the packets it dropped (established traffic passes by
// conntrack, before any rule). Rule is the compiled entry's origin
// ("Kind ns/name path") or an endpoint's default deny ("default-deny
// ingress of y/b"), as `cnlab policy show --counters` shows them.
type PolicyCounter struct {
	Rule    string `json:"rule"`
	Verdict string `json:"verdict"` // allow, deny, pass or default-deny
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Sample is one repetition's measurement.
type Sample struct {
	Repetition int                `json:"repetition"`
	At         time.Time          `json:"at"`
	Seconds    float64            `json:"seconds"` // wall time of the whole sample
	Metrics    map[string]float64 `json:"metrics"`
	Log        string             `json:"log"`             // relative to the results directory
	Noise      *Noise             `json:"noise,omitempty"` // what else the machine did meanwhile
	// Series is the file of the sample's per-second series, relative to
	// the results directory (series/POINT-rN.json: LoadSeries), when its
	// workload reports seconds (streams, rr, http). Runs from before it
	// was recorded have none.
	Series string `json:"seriesFile,omitempty"`
}

// ProfileResult is what the profiled run of a point saw.
type ProfileResult struct {
	Metrics  map[string]float64       `json:"metrics,omitempty"` // of the profiled run (not in the samples)
	Kernel   *KernelProfile           `json:"kernel"`
	IPTables map[string][]RuleCounter `json:"iptablesCounters,omitempty"` // per host netns
	Error    string                   `json:"error,omitempty"`
	Log      string                   `json:"log"`
}

// Summarize recomputes a point's summaries from its samples.
func (p *PointResult) Summarize() {
	by := map[string][]float64{}
	for _, s := range p.Samples {
		for k, v := range s.Metrics {
			by[k] = append(by[k], v)
		}
	}
	p.Summary = map[string]Summary{}
	for k, xs := range by {
		p.Summary[k] = Summarize(xs)
	}
}

// Write saves results.json and results.csv into dir, atomically each.
func (r *Results) Write(dir string) error {
	if err := files.WriteJSON(filepath.Join(dir, "results.json"), r, true); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return r.writeCSV(filepath.Join(dir, "results.csv"))
}

// CSVParams are results.csv's first columns: the point, its parameters
// (Axes) and its workload's effective options, the repetition, then the
// kubernetes backend's parameters and nodes. Then come the axes placed
// CSVWhenSet that some point of the run sets, and one column per
// metric (the union over the run, sorted; empty where a workload has no
// such metric): one row per sample.
var CSVParams = func() []string {
	cols := []string{"point", "sweep", "series", "workload"}
	for _, a := range csvAxes {
		cols = append(cols, a.Key)
	}
	cols = append(cols, "kind", "flows", "streams", "length", "rate", "zerocopy", "requestSize", "responseSize", "count",
		"mode", "concurrency", "method", "path", "expect", "repetition")
	for _, a := range csvLastAxes {
		cols = append(cols, a.Key)
	}
	return append(cols, "clientNode", "serverNode")
}()

func (r *Results) writeCSV(path string) error {
	metrics := map[string]bool{}
	for _, p := range r.Points {
		for _, s := range p.Samples {
			for k := range s.Metrics {
				metrics[k] = true
			}
		}
	}
	names := slices.Sorted(maps.Keys(metrics))
	var whenSet []*Axis
	for _, a := range csvWhenSetAxes {
		if slices.ContainsFunc(r.Points, func(p PointResult) bool { return a.isSet(p.Params) }) {
			whenSet = append(whenSet, a)
		}
	}
	header := append([]string(nil), CSVParams...)
	for _, a := range whenSet {
		header = append(header, a.Key)
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(append(header, names...))
	itoa := strconv.Itoa
	btoa := strconv.FormatBool
	for _, p := range r.Points {
		q, wl := p.Params, p.Workload
		for _, s := range p.Samples {
			row := []string{p.ID, p.Sweep, p.Series, wl.Name()}
			for _, a := range csvAxes {
				row = append(row, a.Value(q))
			}
			row = append(row, wl.Kind, itoa(wl.Flows), itoa(wl.Streams), itoa(wl.Length), wl.Rate,
				btoa(wl.Zerocopy), itoa(wl.RequestSize), itoa(wl.ResponseSize), itoa(wl.Count), wl.Mode, itoa(wl.Concurrency), wl.Method, wl.Path, JoinInts(wl.Expect), itoa(s.Repetition))
			for _, a := range csvLastAxes {
				row = append(row, a.Value(q))
			}
			row = append(row, p.Nodes["client"], p.Nodes["server"])
			for _, a := range whenSet {
				row = append(row, a.Value(q))
			}
			for _, k := range names {
				v, ok := s.Metrics[k]
				if ok {
					row = append(row, strconv.FormatFloat(v, 'g', -1, 64))
				} else {
					row = append(row, "")
				}
			}
			_ = w.Write(row)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return files.WriteAtomic(path, buf.Bytes())
}

// Load reads a results directory's results.json.
func Load(dir string) (*Results, error) {
	var r Results
	path := filepath.Join(dir, "results.json")
	if err := files.ReadJSON(path, &r); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		if errors.As(err, &se) || errors.As(err, &te) || errors.Is(err, io.ErrUnexpectedEOF) || err.Error() == "unexpected end of JSON input" {
			return nil, fmt.Errorf("%s: not a cnlab results file (%v)", path, err)
		}
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("%s: results schema %d; this cnlab reads schema %d", dir, r.Schema, Schema)
	}
	return &r, nil
}

// Check validates results against the schema's rules: what a reader of
// results.json may rely on. It returns every problem found.
func (r *Results) Check() []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if r.Schema != Schema {
		add("schema %d, want %d", r.Schema, Schema)
	}
	if r.Experiment.Text == "" || r.Experiment.Spec == nil {
		add("the experiment file is missing")
	}
	if !slices.Contains([]string{StatusRunning, StatusComplete, StatusInterrupted, StatusFailed}, r.Status) {
		add("status %q", r.Status)
	}
	if r.Status != StatusRunning && r.FinishedAt == nil {
		add("a finished run has no finishedAt")
	}
	ids := map[string]bool{}
	for _, p := range r.Points {
		if ids[p.ID] {
			add("point %s twice", p.ID)
		}
		ids[p.ID] = true
		if !slices.Contains([]string{PointPending, PointDone, PointPartial, PointFailed}, p.Status) {
			add("point %s: status %q", p.ID, p.Status)
		}
		if p.Status == PointFailed && p.Error == "" {
			add("point %s failed without an error", p.ID)
		}
		switch {
		case p.Precision != nil && p.Status == PointDone && (len(p.Samples) < p.Repetitions || len(p.Samples) > max(p.Repetitions, p.Precision.MaxRepetitions)):
			add("point %s done with %d samples, outside its %d to %d", p.ID, len(p.Samples), p.Repetitions, max(p.Repetitions, p.Precision.MaxRepetitions))
		case p.Precision != nil && p.Status == PointDone:
		case p.Status == PointDone && len(p.Samples) != p.Repetitions:
			add("point %s done with %d of %s", p.ID, len(p.Samples), plural.N(p.Repetitions, "sample"))
		case p.Status == PointPartial && (len(p.Samples) == 0 || len(p.Samples) >= p.Repetitions):
			add("point %s partial with %d of %s", p.ID, len(p.Samples), plural.N(p.Repetitions, "sample"))
		case p.Status == PointPending && len(p.Samples) > 0:
			add("point %s pending with %s", p.ID, plural.N(len(p.Samples), "sample"))
		}
		if r.Status == StatusComplete && p.Status != PointDone && p.Status != PointFailed {
			add("complete run, point %s %s", p.ID, p.Status)
		}
		n := map[string]int{}
		for _, s := range p.Samples {
			if len(s.Metrics) == 0 {
				add("point %s repetition %d has no metrics", p.ID, s.Repetition)
			}
			for k := range s.Metrics {
				n[k]++
			}
		}
		for k, c := range n {
			if p.Summary[k].N != c {
				add("point %s metric %s: summary of %s, %d taken", p.ID, k, plural.N(p.Summary[k].N, "sample"), c)
			}
		}
	}
	for _, j := range r.Order {
		if !ids[j.Point] {
			add("order names unknown point %s", j.Point)
		}
	}
	sort.Strings(bad)
	return bad
}

// JoinInts writes a list of integers as results.csv and the http
// client's --expect do: "200,403".
func JoinInts(vs []int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}
