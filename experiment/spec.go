// Package experiment runs declarative sweeps: an experiment file names a
// topology, a matrix of parameters (datapath, number and shape of
// policies, chain length, link kind, flows, sizes, MTU, offloads, host
// routing, network functions in chain hops) and the workloads to measure
// at every point. Run expands the matrix, runs the points in a shuffled
// order (rebuilding the lab only when its topology changes), and keeps
// every sample in a results directory (results.json, results.csv,
// environment.json, logs/) that reports and comparisons read later.
//
// The runner drives the topology, policy, datapath and traffic packages
// through their Go APIs; only the measuring tools (iperf3, cnlab rr, ping)
// run as processes, inside the lab's endpoints.
package experiment

import (
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/input"

	"gopkg.in/yaml.v3"

	"github.com/cnlab/cnlab/internal/yamlx"
)

// Spec is a parsed experiment file: the data results.json records
// (results.Spec) and what parsing, expanding and checking it needs.
type Spec struct {
	results.Spec `yaml:",inline"`
	Dir          string `yaml:"-" json:"-"` // directory of the file, for relative topology files
	File         string `yaml:"-" json:"-"`
	quick        bool
	allSkipped   bool       // quick: every sweep had quick.skip
	c            *specCache `yaml:"-"`
}

func checkFigures(f *results.Figures, s *Spec, path string) error {
	if f == nil {
		return nil
	}
	if f.X != "" && !slices.Contains(results.FigureX, f.X) {
		return s.errf(path+".x", "%q: one of %s", f.X, strings.Join(results.FigureX, ", "))
	}
	for i, m := range f.Metrics {
		if !slices.Contains(results.FigureMetrics, m) {
			return s.errf(fmt.Sprintf("%s.metrics[%d]", path, i), "%q: one of %s", m, strings.Join(results.FigureMetrics, ", "))
		}
	}
	for m, text := range f.Reference {
		switch {
		case !slices.Contains(results.FigureMetrics, m):
			return s.errf(path+".reference."+m, "%q: one of %s", m, strings.Join(results.FigureMetrics, ", "))
		case strings.TrimSpace(text) == "" || len(text) > 1000:
			return s.errf(path+".reference."+m, "the seed's numbers in words, 1 to 1000 characters")
		}
	}
	return checkCost(f.Cost, s, path+".cost")
}

// checkCost checks a figure's cost: an axis that names lines, a base
// value the axis can take, and a band with a label.
func checkCost(c *results.Cost, s *Spec, path string) error {
	if c == nil {
		return nil
	}
	a := results.AxisOf(c.Axis)
	switch {
	case a == nil || a.Show == nil || a.FigureX > 0 || a.IsInt():
		var keys []string
		for _, a := range results.Axes {
			if a.Show != nil && a.FigureX == 0 && !a.IsInt() {
				keys = append(keys, a.Key)
			}
		}
		return s.errf(path+".axis", "%q: an axis whose values name lines, one of %s", c.Axis, strings.Join(keys, ", "))
	case c.Base == "":
		return s.errf(path+".base", "the value of %s the others are measured against", c.Axis)
	}
	err := a.CheckValue(c.Base)
	if check := axisChecks[a.Key]; err == nil && check != nil {
		err = check(c.Base)
	}
	if err != nil {
		return s.errf(path+".base", "%v", err)
	}
	if b := c.Reference; b != nil {
		switch {
		case b.From > b.To || math.IsNaN(b.From) || math.IsNaN(b.To) || math.IsInf(b.From, 0) || math.IsInf(b.To, 0):
			return s.errf(path+".reference", "from %g to %g: a range, from at most to", b.From, b.To)
		case strings.TrimSpace(b.Label) == "" || len(b.Label) > 200:
			return s.errf(path+".reference.label", "who reported the range, 1 to 200 characters")
		}
	}
	return nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Limits of an experiment file.
const (
	MaxPoints      = 10000
	MaxRepetitions = 1000
	maxDuration    = 24 * time.Hour
)

// Parse decodes an experiment file strictly and validates it. file names
// it in errors and locates relative topology files. quick applies the
// file's quick: block.
func Parse(data []byte, file string, quick bool) (*Spec, error) {
	return ParseFor(data, file, quick, "")
}

// ParseFor is Parse for a run on backend (BackendLab, "" or
// BackendKubernetes): what cannot apply there is refused naming its key.
func ParseFor(data []byte, file string, quick bool, backend string) (*Spec, error) {
	docs, err := yamlx.Documents(data)
	if err != nil {
		return nil, &input.Error{File: file, Msg: err.Error()}
	}
	switch {
	case len(docs) == 0:
		return nil, &input.Error{File: file, Msg: "empty experiment document"}
	case len(docs) > 1:
		return nil, &input.Error{File: file, Msg: "more than one YAML document: an experiment file holds exactly one"}
	case docs[0].Kind != yaml.MappingNode:
		return nil, &input.Error{File: file, Msg: "an experiment must be a mapping (name:, workloads:, matrix:, ...)"}
	}
	s := &Spec{File: file, Dir: filepath.Dir(file), c: &specCache{topologies: map[string]topologyFile{}}, Spec: results.Spec{Warmup: unsetDuration, Duration: unsetDuration, Repetitions: unsetInt}}
	// Every unknown field and value of the wrong kind at once.
	var errs []*input.Error
	for _, ye := range yamlx.DecodeAll(docs[0], s, "") {
		errs = append(errs, &input.Error{File: file, Path: ye.Path, Msg: ye.Msg})
	}
	if err := input.Join(errs); err != nil {
		return nil, err
	}
	if quick {
		s.applyQuick()
	}
	if err := s.setBackend(backend); err != nil {
		return nil, err
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Spec) applyQuick() {
	s.quick = true
	apply := func(q *results.Quick, m *results.Matrix, wl *[]results.Workload) {
		if q == nil {
			return
		}
		m.Override(q.Matrix)
		if len(q.Workloads) > 0 {
			*wl = q.Workloads
		}
	}
	if q := s.Quick; q != nil {
		if q.Warmup != nil {
			s.Warmup = *q.Warmup
		}
		if q.Duration != nil {
			s.Duration = *q.Duration
		}
		if q.Repetitions != nil {
			s.Repetitions = *q.Repetitions
		}
		if q.Precision != nil {
			s.Precision = q.Precision
		}
		apply(q, &s.Matrix, &s.Workloads)
		for i := range s.Sweeps {
			// The experiment's quick matrix shortens every sweep that sweeps
			// the same key; a sweep's own quick block comes last.
			s.Sweeps[i].Matrix.OverrideSet(q.Matrix)
		}
	}
	kept := s.Sweeps[:0]
	for _, sw := range s.Sweeps {
		if sw.Quick == nil || !sw.Quick.Skip {
			kept = append(kept, sw)
		}
	}
	if len(kept) == 0 && len(s.Sweeps) > 0 {
		s.allSkipped = true
		return
	}
	s.Sweeps = kept
	for i := range s.Sweeps {
		sw := &s.Sweeps[i]
		apply(sw.Quick, &sw.Matrix, &sw.Workloads)
		if sw.Quick != nil && sw.Quick.Precision != nil {
			sw.Precision = sw.Quick.Precision
		}
		if sw.Quick != nil && sw.Quick.Repetitions != nil {
			sw.Repetitions = *sw.Quick.Repetitions
		} else if sw.Repetitions > 0 && s.Quick != nil && s.Quick.Repetitions != nil {
			sw.Repetitions = min(sw.Repetitions, *s.Quick.Repetitions)
		}
	}
}

// IsQuick reports whether the quick: block was applied.
func (s *Spec) IsQuick() bool { return s.quick }

// unsetDuration and unsetInt mark fields the file does not give, so that
// an explicit 0 is told from a missing value.
const (
	unsetDuration = results.Duration(math.MinInt64)
	unsetInt      = math.MinInt
)

// Defaults of an experiment.
const (
	DefaultWarmup      = 2 * time.Second
	DefaultDuration    = 10 * time.Second
	DefaultRepetitions = 3
)

func (s *Spec) errf(path, format string, args ...any) error {
	return &input.Error{File: s.File, Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (s *Spec) validate() error {
	if s.allSkipped {
		return s.errf("sweeps", "every sweep has quick: {skip: true}: a quick run would measure nothing")
	}
	if s.Quick != nil && s.Quick.Skip {
		return s.errf("quick.skip", "applies to a sweep's quick block (sweeps[i].quick.skip), not to the experiment's")
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(s.File), filepath.Ext(s.File))
	}
	if s.Duration == unsetDuration {
		s.Duration = results.Duration(DefaultDuration)
	}
	if s.Warmup == unsetDuration {
		s.Warmup = results.Duration(DefaultWarmup)
	}
	if s.Repetitions == unsetInt {
		s.Repetitions = DefaultRepetitions
	}
	if !validName.MatchString(s.Name) {
		return s.errf("name", "%q: letters, digits, '.', '_' and '-' only (it names the results directory)", s.Name)
	}
	switch {
	case s.Duration < results.Duration(100*time.Millisecond) || s.Duration > results.Duration(maxDuration):
		return s.errf("duration", "%v: between 100ms and 24h", time.Duration(s.Duration))
	case s.Warmup < 0 || s.Warmup > results.Duration(time.Hour):
		return s.errf("warmup", "%v: between 0 and 1h", time.Duration(s.Warmup))
	case s.Repetitions < 1 || s.Repetitions > MaxRepetitions:
		return s.errf("repetitions", "%d: between 1 and %d", s.Repetitions, MaxRepetitions)
	}
	if err := checkPrecision(s.Precision, s, "precision"); err != nil {
		return err
	}
	for i := range s.Sweeps {
		if err := checkPrecision(s.Sweeps[i].Precision, s, fmt.Sprintf("sweeps[%d].precision", i)); err != nil {
			return err
		}
	}
	if s.Pin != nil {
		for _, c := range []struct {
			name string
			cpu  *int
		}{{"client", s.Pin.Client}, {"server", s.Pin.Server}} {
			if c.cpu != nil && (*c.cpu < 0 || *c.cpu >= maxCPU()) {
				return s.errf("pin."+c.name, "CPU %d does not exist here (CPUs 0 to %d)", *c.cpu, maxCPU()-1)
			}
		}
	}
	if err := s.checkWorkloads("workloads", s.Workloads, len(s.Sweeps) == 0); err != nil {
		return err
	}
	if len(s.Sweeps) == 0 {
		if err := checkMatrix(s.Matrix, s, "matrix"); err != nil {
			return err
		}
	}
	names := map[string]bool{}
	for i, sw := range s.Sweeps {
		path := fmt.Sprintf("sweeps[%d]", i)
		if sw.Name == "" {
			return s.errf(path+".name", "every sweep needs a name")
		}
		if names[sw.Name] {
			return s.errf(path+".name", "%q is used twice", sw.Name)
		}
		names[sw.Name] = true
		if sw.Repetitions < 0 || sw.Repetitions > MaxRepetitions {
			return s.errf(path+".repetitions", "%d: between 1 and %d", sw.Repetitions, MaxRepetitions)
		}
		if err := checkFigures(sw.Figures, s, path+".figures"); err != nil {
			return err
		}
		m := s.Matrix
		m.Override(sw.Matrix)
		if err := checkMatrix(m, s, path+".matrix"); err != nil {
			return err
		}
		if f := sw.Figures; f != nil {
			if err := checkSeedValues(f.SeedValues, m, s, path+".figures.seedValues"); err != nil {
				return err
			}
		}
		wl := sw.Workloads
		if len(wl) == 0 {
			wl = s.Workloads
		}
		if err := s.checkWorkloads(path+".workloads", wl, true); err != nil {
			return err
		}
	}
	s.forgetPoints() // validate runs again after Override changed the spec
	pts, err := s.Points()
	if err != nil {
		return err
	}
	if len(pts) == 0 {
		return s.errf("matrix", "expands to no point")
	}
	for _, p := range pts {
		if p.Workload.Kind == results.AB && time.Duration(s.Duration)%time.Second != 0 {
			return s.errf("duration", "%v: ab (the ab workload) runs for whole seconds (-t)", time.Duration(s.Duration))
		}
		if p.Workload.Kind == results.AB && time.Duration(s.Warmup)%time.Second != 0 {
			return s.errf("warmup", "%v: ab (the ab workload) warms up for whole seconds (-t)", time.Duration(s.Warmup))
		}
		if p.Workload.Kind != results.TCPStream && p.Workload.Kind != results.UDPStream && p.Workload.Kind != results.TCPRRUnderLoad {
			continue
		}
		if time.Duration(s.Duration)%time.Second != 0 {
			return s.errf("duration", "%v: iperf3 (the %s workload) measures whole seconds", time.Duration(s.Duration), p.Workload.Kind)
		}
		if time.Duration(s.Warmup)%time.Second != 0 {
			return s.errf("warmup", "%v: iperf3 (the %s workload) omits whole seconds", time.Duration(s.Warmup), p.Workload.Kind)
		}
	}
	return nil
}

func (s *Spec) checkWorkloads(path string, wl []results.Workload, required bool) error {
	if len(wl) == 0 {
		if required {
			return s.errf(path, "give at least one workload (kinds: %s)", strings.Join(results.WorkloadKinds, ", "))
		}
		return nil
	}
	for i := range wl {
		w := &wl[i]
		p := fmt.Sprintf("%s[%d]", path, i)
		if !slices.Contains(results.WorkloadKinds, w.Kind) {
			return s.errf(p+".kind", "%q is not a workload (kinds: %s)", w.Kind, strings.Join(results.WorkloadKinds, ", "))
		}
		stream := w.Kind == results.TCPStream || w.Kind == results.UDPStream
		rr := w.Kind == results.TCPRR || w.Kind == results.TCPCRR || w.Kind == results.UDPRR
		underLoad := w.Kind == results.TCPRRUnderLoad
		bad := func(field string, set bool, what string) error {
			if set {
				return s.errf(p+"."+field, "applies to %s workloads only", what)
			}
			return nil
		}
		if w.Streams != 0 && !stream && !underLoad {
			return s.errf(p+".streams", "applies to tcp-stream and udp-stream workloads only, and to tcp-rr-under-load (its load streams)")
		}
		for _, e := range []error{
			bad("flows", w.Flows != 0 && !stream, "tcp-stream and udp-stream"),
			bad("length", w.Length != 0 && !stream, "tcp-stream and udp-stream"),
			bad("rate", w.Rate != "" && w.Kind != results.UDPStream, "udp-stream"),
			bad("zerocopy", w.Zerocopy && w.Kind != results.TCPStream, "tcp-stream"),
			bad("bidirectional", w.Bidirectional && w.Kind != results.TCPStream && !underLoad, "tcp-stream and tcp-rr-under-load (its load streams)"),
			bad("requestSize", w.RequestSize != 0 && !rr && !underLoad, "tcp-rr, tcp-crr, udp-rr and tcp-rr-under-load"),
			bad("responseSize", w.ResponseSize != 0 && !rr && !underLoad, "tcp-rr, tcp-crr, udp-rr and tcp-rr-under-load"),
			bad("count", w.Count != 0 && w.Kind != results.Ping, "ping"),
			bad("mode", w.Mode != "" && !results.IsHTTP(w.Kind), "http and ab"),
			bad("concurrency", w.Concurrency != 0 && !results.IsHTTP(w.Kind), "http and ab"),
			bad("method", w.Method != "" && !results.IsHTTP(w.Kind), "http and ab"),
			bad("path", w.Path != "" && !results.IsHTTP(w.Kind), "http and ab"),
			bad("expect", len(w.Expect) > 0 && !results.IsHTTP(w.Kind), "http and ab"),
		} {
			if e != nil {
				return e
			}
		}
		switch {
		case w.Streams < 0 || w.Streams > 128:
			return s.errf(p+".streams", "%d: between 1 and 128", w.Streams)
		case w.Flows < 0 || w.Flows > results.MaxFlows:
			return s.errf(p+".flows", "%d: between 1 and %d", w.Flows, results.MaxFlows)
		case w.Length < 0 || w.Length > 1<<20 || (w.Kind == results.UDPStream && w.Length > 65507):
			return s.errf(p+".length", "%d bytes: between 1 and %d", w.Length, map[bool]int{true: 65507, false: 1 << 20}[w.Kind == results.UDPStream])
		case w.RequestSize < 0 || w.RequestSize > 65000:
			return s.errf(p+".requestSize", "%d bytes: between 1 and 65000", w.RequestSize)
		case w.ResponseSize < 0 || w.ResponseSize > 65000:
			return s.errf(p+".responseSize", "%d bytes: between 1 and 65000", w.ResponseSize)
		case w.Count < 0 || w.Count > 100000:
			return s.errf(p+".count", "%d: between 2 and 100000", w.Count)
		}
		if w.Rate != "" {
			if _, err := parseRate(w.Rate); err != nil {
				return s.errf(p+".rate", "%v", err)
			}
		}
		// Defaults: netperf's 1/1 for rr, one stream, 10 pings.
		if stream && w.Streams == 0 {
			w.Streams = 1
		}
		if stream && w.Flows == 0 {
			w.Flows = 1
		}
		if rr && w.RequestSize == 0 {
			w.RequestSize = 1
		}
		if rr && w.ResponseSize == 0 {
			w.ResponseSize = 1
		}
		if w.Kind == results.Ping && w.Count == 0 {
			w.Count = 10
		}
		if w.Kind == results.Ping && w.Count < 2 {
			return s.errf(p+".count", "%d: at least 2 (the first reply and the steady ones)", w.Count)
		}
		if underLoad {
			if err := s.checkUnderLoad(p, w); err != nil {
				return err
			}
		}
		if results.IsHTTP(w.Kind) {
			if err := s.checkHTTPWorkload(p, w); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseRate reads an iperf3 rate: a number with an optional K, M or G
// suffix (bits per second).
func parseRate(r string) (float64, error) {
	if r == "0" {
		return 0, nil // iperf3 -b 0: as fast as it can
	}
	mult := 1.0
	num := r
	switch strings.ToUpper(r[len(r)-1:]) {
	case "K":
		mult, num = 1e3, r[:len(r)-1]
	case "M":
		mult, num = 1e6, r[:len(r)-1]
	case "G":
		mult, num = 1e9, r[:len(r)-1]
	}
	var v float64
	if _, err := fmt.Sscanf(num, "%g", &v); err != nil || v <= 0 || fmt.Sprint(v) != num && strings.TrimRight(strings.TrimRight(num, "0"), ".") != fmt.Sprint(v) {
		return 0, fmt.Errorf("%q is not a rate (e.g. 500M, 1G, 100K: bits per second)", r)
	}
	return v * mult, nil
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
