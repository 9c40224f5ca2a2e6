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
	"errors"
	"fmt"
	"math"
	"net/http"
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

// Spec is a parsed experiment file.
type Spec struct {
	Name        string     `yaml:"name" json:"name"`
	Description string     `yaml:"description" json:"description,omitempty"`
	Seed        *int64     `yaml:"seed" json:"seed,omitempty"`
	Warmup      Duration   `yaml:"warmup" json:"warmup"`
	Duration    Duration   `yaml:"duration" json:"duration"`
	Repetitions int        `yaml:"repetitions" json:"repetitions"`
	Precision   *Precision `yaml:"precision" json:"precision,omitempty"`
	Pin         *Pin       `yaml:"pin" json:"pin,omitempty"`
	Profile     bool       `yaml:"profile" json:"profile,omitempty"`
	Workloads   []Workload `yaml:"workloads" json:"workloads"`
	Matrix      Matrix     `yaml:"matrix" json:"matrix"`
	Sweeps      []Sweep    `yaml:"sweeps" json:"sweeps,omitempty"`
	Quick       *Quick     `yaml:"quick" json:"quick,omitempty"`
	// Backend is where the points are measured ("": a lab; ParseFor).
	Backend    string `yaml:"-" json:"backend,omitempty"`
	Dir        string `yaml:"-" json:"-"` // directory of the file, for relative topology files
	File       string `yaml:"-" json:"-"`
	quick      bool
	allSkipped bool // quick: every sweep had quick.skip
}

// Sweep is one matrix of an experiment with several. Its matrix keys
// replace the experiment's; its workloads, if given, replace them too.
type Sweep struct {
	Name      string     `yaml:"name" json:"name"`
	Matrix    Matrix     `yaml:"matrix" json:"matrix"`
	Workloads []Workload `yaml:"workloads" json:"workloads,omitempty"`
	Profile   *bool      `yaml:"profile" json:"profile,omitempty"`
	// Repetitions, when set, replaces the experiment's for this sweep.
	Repetitions int        `yaml:"repetitions" json:"repetitions,omitempty"`
	Precision   *Precision `yaml:"precision" json:"precision,omitempty"`
	Quick       *Quick     `yaml:"quick" json:"quick,omitempty"`
	// Figures tells the report how to draw the sweep (a seed's own axes).
	Figures *Figures `yaml:"figures" json:"figures,omitempty"`
}

// Figures chooses a sweep's figure axes: X is the swept parameter on the
// x axis (by default the first of FigureX that varies), the others that
// vary name the lines; Metrics are drawn in addition to the workload's
// own (packets/s, CPU).
type Figures struct {
	X       string   `yaml:"x" json:"x,omitempty"`
	Metrics []string `yaml:"metrics" json:"metrics,omitempty"`
	// Topologies draws the sweep's topologies on one figure, one line
	// each, instead of a figure per topology (seed 000's 7.9 and 7.10).
	Topologies bool `yaml:"topologies" json:"topologies,omitempty"`
	// RelativeTo adds, for each figure, one of every line divided by the
	// line of this series at the same x, in percent (seed 001's figure 11,
	// "relative to no qdisc").
	RelativeTo string `yaml:"relativeTo" json:"relativeTo,omitempty"`
	// Reference quotes, per metric, what the seed measured, to be printed
	// under every figure of that metric in the sweep (the seed's own
	// numbers beside cnlab's).
	Reference map[string]string `yaml:"reference" json:"reference,omitempty"`
}

// FigureX are the parameters a figure can have on its x axis, in the
// order the report picks one by default.
var FigureX = []string{"policies", "chainLength", "switches", "firewallRules", "services", "l7Rules", "flows", "size", "mtu"}

// FigureMetrics are the sample metrics a sweep may ask figures of.
var FigureMetrics = []string{"throughput_gbps", "sent_gbps", "packets_per_s", "retransmits", "loss_pct", "jitter_ms",
	"transactions_per_s", "latency_mean_us", "latency_p50_us", "latency_p90_us", "latency_p99_us", "latency_p999_us",
	"connect_p50_us", "connect_p99_us", "first_rtt_us", "rtt_us", "sender_cpu_pct", "receiver_cpu_pct", "client_cpu_pct", "system_cpu_pct", "server_system_cpu_pct",
	"requests_per_s", "unexpected", "errors", "proxy_cpu_pct"}

func (f *Figures) check(s *Spec, path string) error {
	if f == nil {
		return nil
	}
	if f.X != "" && !slices.Contains(FigureX, f.X) {
		return s.errf(path+".x", "%q: one of %s", f.X, strings.Join(FigureX, ", "))
	}
	for i, m := range f.Metrics {
		if !slices.Contains(FigureMetrics, m) {
			return s.errf(fmt.Sprintf("%s.metrics[%d]", path, i), "%q: one of %s", m, strings.Join(FigureMetrics, ", "))
		}
	}
	for m, text := range f.Reference {
		switch {
		case !slices.Contains(FigureMetrics, m):
			return s.errf(path+".reference."+m, "%q: one of %s", m, strings.Join(FigureMetrics, ", "))
		case strings.TrimSpace(text) == "" || len(text) > 1000:
			return s.errf(path+".reference."+m, "the seed's numbers in words, 1 to 1000 characters")
		}
	}
	return nil
}

// Quick is what --quick changes: shorter runs, fewer values.
type Quick struct {
	Warmup      *Duration  `yaml:"warmup" json:"warmup,omitempty"`
	Duration    *Duration  `yaml:"duration" json:"duration,omitempty"`
	Repetitions *int       `yaml:"repetitions" json:"repetitions,omitempty"`
	Precision   *Precision `yaml:"precision" json:"precision,omitempty"`
	Matrix      Matrix     `yaml:"matrix" json:"matrix,omitempty"`
	Workloads   []Workload `yaml:"workloads" json:"workloads,omitempty"`
	// Skip leaves a sweep out of quick runs (a sweep's quick block only).
	Skip bool `yaml:"skip" json:"skip,omitempty"`
}

// Pin places the client and server processes on CPUs.
type Pin struct {
	Client *int `yaml:"client" json:"client,omitempty"`
	Server *int `yaml:"server" json:"server,omitempty"`
}

// Matrix holds the values of every swept parameter. An empty list means
// the parameter keeps its default.
type Matrix struct {
	Topology         []string `yaml:"topology" json:"topology,omitempty"`
	Link             []string `yaml:"link" json:"link,omitempty"`
	ChainLength      []int    `yaml:"chainLength" json:"chainLength,omitempty"`
	Datapath         []string `yaml:"datapath" json:"datapath,omitempty"`
	HostRouting      []string `yaml:"hostRouting" json:"hostRouting,omitempty"`
	SocketLB         []bool   `yaml:"socketLB" json:"socketLB,omitempty"` // ebpf: translate to Services at the socket too
	Peers            []string `yaml:"peers" json:"peers,omitempty"`       // iptables: addresses or ipsets
	Policies         []int    `yaml:"policies" json:"policies,omitempty"`
	PolicyMode       []string `yaml:"policyMode" json:"policyMode,omitempty"`
	Flows            []int    `yaml:"flows" json:"flows,omitempty"`
	Size             []int    `yaml:"size" json:"size,omitempty"`
	MTU              []int    `yaml:"mtu" json:"mtu,omitempty"`
	Offloads         []string `yaml:"offloads" json:"offloads,omitempty"`
	Zerocopy         []bool   `yaml:"zerocopy" json:"zerocopy,omitempty"`
	FirewallRules    []int    `yaml:"firewallRules" json:"firewallRules,omitempty"`
	FirewallStateful []bool   `yaml:"firewallStateful" json:"firewallStateful,omitempty"`
	FirewallSpread   []bool   `yaml:"firewallSpread" json:"firewallSpread,omitempty"`
	ShaperRate       []string `yaml:"shaperRate" json:"shaperRate,omitempty"`
	ShaperDirection  []string `yaml:"shaperDirection" json:"shaperDirection,omitempty"`
	Switches         []int    `yaml:"switches" json:"switches,omitempty"`
	SwitchLink       []string `yaml:"switchLink" json:"switchLink,omitempty"`
	// Services sweeps the number of Kubernetes Services installed (see
	// services.go), served by ServiceProxy (default: the datapath's),
	// each of the others with ServiceBackends backends; the workloads but
	// ping connect through the measured one, placed first or last
	// (ServicePosition) among them.
	Services        []int    `yaml:"services" json:"services,omitempty"`
	ServiceProxy    []string `yaml:"serviceProxy" json:"serviceProxy,omitempty"`
	ServiceBackends []int    `yaml:"serviceBackends" json:"serviceBackends,omitempty"`
	ServicePosition []string `yaml:"servicePosition" json:"servicePosition,omitempty"`
	// L7Mode sweeps one CiliumNetworkPolicy on the server for the HTTP
	// workloads (see l7.go): none, l4 (an L3/L4 allow of port 80),
	// http-any (rules.http: [{}]) or rules: L7Rules HTTP rules with the
	// one matching the request first, last or absent (L7Match).
	L7Mode  []string `yaml:"l7Mode" json:"l7Mode,omitempty"`
	L7Rules []int    `yaml:"l7Rules" json:"l7Rules,omitempty"`
	L7Match []string `yaml:"l7Match" json:"l7Match,omitempty"`
	// Placement and Network apply to the kubernetes backend only
	// (docs/kubernetes.md): the server on the client's node or another,
	// and the agent pods in the pod network or the node's.
	Placement []string `yaml:"placement" json:"placement,omitempty"`
	Network   []string `yaml:"network" json:"network,omitempty"`
}

// Workload kinds.
const (
	TCPStream = "tcp-stream"
	UDPStream = "udp-stream"
	TCPRR     = "tcp-rr"
	TCPCRR    = "tcp-crr"
	UDPRR     = "udp-rr"
	Ping      = "ping"
	HTTP      = "http" // cnlab http server and client
	AB        = "ab"   // ApacheBench against cnlab http server
)

var workloadKinds = []string{TCPStream, UDPStream, TCPRR, TCPCRR, UDPRR, Ping, HTTP, AB}

// isHTTP reports whether a workload kind sends HTTP requests to port
// HTTPPort.
func isHTTP(k string) bool { return k == HTTP || k == AB }

// Workload is one measurement made at every point.
type Workload struct {
	Kind         string `yaml:"kind" json:"kind"`
	Flows        int    `yaml:"flows" json:"flows,omitempty"`               // streams: iperf3 client/server pairs at once (matrix flows)
	Streams      int    `yaml:"streams" json:"streams,omitempty"`           // streams: parallel streams of each (iperf3 -P)
	Length       int    `yaml:"length" json:"length,omitempty"`             // streams: bytes per write / UDP datagram (iperf3 -l)
	Rate         string `yaml:"rate" json:"rate,omitempty"`                 // udp-stream: target rate (iperf3 -b), e.g. 1G
	Zerocopy     bool   `yaml:"zerocopy" json:"zerocopy,omitempty"`         // tcp-stream: iperf3 -Z
	RequestSize  int    `yaml:"requestSize" json:"requestSize,omitempty"`   // rr: bytes per request
	ResponseSize int    `yaml:"responseSize" json:"responseSize,omitempty"` // rr: bytes per response
	Count        int    `yaml:"count" json:"count,omitempty"`               // ping: echo requests per sample
	// http and ab: connections (keepalive or new), workers, the request
	// and the statuses it may get (default 200; 403 by itself at a point
	// whose L7 rules deny the request).
	Mode        string `yaml:"mode" json:"mode,omitempty"`
	Concurrency int    `yaml:"concurrency" json:"concurrency,omitempty"`
	Method      string `yaml:"method" json:"method,omitempty"`
	Path        string `yaml:"path" json:"path,omitempty"`
	Expect      []int  `yaml:"expect" json:"expect,omitempty"`
}

// Name is a short label of the workload with its options, for tables.
func (w Workload) Name() string {
	var parts []string
	switch w.Kind {
	case TCPStream, UDPStream:
		if w.Flows > 1 {
			parts = append(parts, fmt.Sprintf("%dflows", w.Flows))
		}
		if w.Streams > 1 {
			parts = append(parts, fmt.Sprintf("P%d", w.Streams))
		}
		if w.Length > 0 {
			parts = append(parts, fmt.Sprintf("%dB", w.Length))
		}
		if w.Rate != "" {
			parts = append(parts, w.Rate)
		}
		if w.Zerocopy {
			parts = append(parts, "zc")
		}
	case TCPRR, TCPCRR, UDPRR:
		parts = append(parts, fmt.Sprintf("%d/%d", w.RequestSize, w.ResponseSize))
	case HTTP, AB:
		parts = append(parts, w.Mode, fmt.Sprintf("c%d", w.Concurrency))
		if w.Method != "" && w.Method != http.MethodGet {
			parts = append(parts, w.Method)
		}
	}
	if len(parts) == 0 {
		return w.Kind
	}
	return w.Kind + " " + strings.Join(parts, " ")
}

// Duration is a time.Duration written as "10s", "500ms" or a number of
// seconds.
type Duration time.Duration

// UnmarshalYAML reads "10s" or 10.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	if v, err := time.ParseDuration(s); err == nil {
		*d = Duration(v)
		return nil
	}
	var secs float64
	if _, err := fmt.Sscanf(s, "%g", &secs); err == nil && fmt.Sprint(secs) == strings.TrimSpace(s) {
		*d = Duration(time.Duration(secs * float64(time.Second)))
		return nil
	}
	// A TypeError carries the line, from which yamlx finds the YAML path.
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration (e.g. 10s, 500ms)", n.Line, s)}}
}

// MarshalJSON writes the duration as Go prints it ("10s").
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := time.ParseDuration(strings.Trim(string(b), `"`))
	*d = Duration(v)
	return err
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Limits of an experiment file.
const (
	MaxPoints      = 10000
	MaxRepetitions = 1000
	MaxPolicies    = 100000
	MaxFlows       = 64 // iperf3 pairs on ports 5201 to 5264
	MaxServices    = 50000
	MaxBackends    = 64
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
	s := &Spec{File: file, Dir: filepath.Dir(file), Warmup: unsetDuration, Duration: unsetDuration, Repetitions: unsetInt}
	if err := yamlx.Decode(docs[0], s, ""); err != nil {
		var ye *yamlx.Error
		if errors.As(err, &ye) {
			return nil, &input.Error{File: file, Path: ye.Path, Msg: ye.Msg}
		}
		return nil, &input.Error{File: file, Msg: err.Error()}
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
	apply := func(q *Quick, m *Matrix, wl *[]Workload) {
		if q == nil {
			return
		}
		m.override(q.Matrix)
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
			s.Sweeps[i].Matrix.overrideSet(q.Matrix)
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
	unsetDuration = Duration(math.MinInt64)
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
		s.Duration = Duration(DefaultDuration)
	}
	if s.Warmup == unsetDuration {
		s.Warmup = Duration(DefaultWarmup)
	}
	if s.Repetitions == unsetInt {
		s.Repetitions = DefaultRepetitions
	}
	if !validName.MatchString(s.Name) {
		return s.errf("name", "%q: letters, digits, '.', '_' and '-' only (it names the results directory)", s.Name)
	}
	switch {
	case s.Duration < Duration(100*time.Millisecond) || s.Duration > Duration(maxDuration):
		return s.errf("duration", "%v: between 100ms and 24h", time.Duration(s.Duration))
	case s.Warmup < 0 || s.Warmup > Duration(time.Hour):
		return s.errf("warmup", "%v: between 0 and 1h", time.Duration(s.Warmup))
	case s.Repetitions < 1 || s.Repetitions > MaxRepetitions:
		return s.errf("repetitions", "%d: between 1 and %d", s.Repetitions, MaxRepetitions)
	}
	if err := s.Precision.check(s, "precision"); err != nil {
		return err
	}
	for i := range s.Sweeps {
		if err := s.Sweeps[i].Precision.check(s, fmt.Sprintf("sweeps[%d].precision", i)); err != nil {
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
		if err := s.Matrix.check(s, "matrix"); err != nil {
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
		if err := sw.Figures.check(s, path+".figures"); err != nil {
			return err
		}
		m := s.Matrix
		m.override(sw.Matrix)
		if err := m.check(s, path+".matrix"); err != nil {
			return err
		}
		wl := sw.Workloads
		if len(wl) == 0 {
			wl = s.Workloads
		}
		if err := s.checkWorkloads(path+".workloads", wl, true); err != nil {
			return err
		}
	}
	pts, err := s.Points()
	if err != nil {
		return err
	}
	if len(pts) == 0 {
		return s.errf("matrix", "expands to no point")
	}
	for _, p := range pts {
		if p.Workload.Kind == AB && time.Duration(s.Duration)%time.Second != 0 {
			return s.errf("duration", "%v: ab (the ab workload) runs for whole seconds (-t)", time.Duration(s.Duration))
		}
		if p.Workload.Kind == AB && time.Duration(s.Warmup)%time.Second != 0 {
			return s.errf("warmup", "%v: ab (the ab workload) warms up for whole seconds (-t)", time.Duration(s.Warmup))
		}
		if p.Workload.Kind != TCPStream && p.Workload.Kind != UDPStream {
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

func (s *Spec) checkWorkloads(path string, wl []Workload, required bool) error {
	if len(wl) == 0 {
		if required {
			return s.errf(path, "give at least one workload (kinds: %s)", strings.Join(workloadKinds, ", "))
		}
		return nil
	}
	for i := range wl {
		w := &wl[i]
		p := fmt.Sprintf("%s[%d]", path, i)
		if !slices.Contains(workloadKinds, w.Kind) {
			return s.errf(p+".kind", "%q is not a workload (kinds: %s)", w.Kind, strings.Join(workloadKinds, ", "))
		}
		stream := w.Kind == TCPStream || w.Kind == UDPStream
		rr := w.Kind == TCPRR || w.Kind == TCPCRR || w.Kind == UDPRR
		bad := func(field string, set bool, what string) error {
			if set {
				return s.errf(p+"."+field, "applies to %s workloads only", what)
			}
			return nil
		}
		for _, e := range []error{
			bad("streams", w.Streams != 0 && !stream, "tcp-stream and udp-stream"),
			bad("flows", w.Flows != 0 && !stream, "tcp-stream and udp-stream"),
			bad("length", w.Length != 0 && !stream, "tcp-stream and udp-stream"),
			bad("rate", w.Rate != "" && w.Kind != UDPStream, "udp-stream"),
			bad("zerocopy", w.Zerocopy && w.Kind != TCPStream, "tcp-stream"),
			bad("requestSize", w.RequestSize != 0 && !rr, "tcp-rr, tcp-crr and udp-rr"),
			bad("responseSize", w.ResponseSize != 0 && !rr, "tcp-rr, tcp-crr and udp-rr"),
			bad("count", w.Count != 0 && w.Kind != Ping, "ping"),
			bad("mode", w.Mode != "" && !isHTTP(w.Kind), "http and ab"),
			bad("concurrency", w.Concurrency != 0 && !isHTTP(w.Kind), "http and ab"),
			bad("method", w.Method != "" && !isHTTP(w.Kind), "http and ab"),
			bad("path", w.Path != "" && !isHTTP(w.Kind), "http and ab"),
			bad("expect", len(w.Expect) > 0 && !isHTTP(w.Kind), "http and ab"),
		} {
			if e != nil {
				return e
			}
		}
		switch {
		case w.Streams < 0 || w.Streams > 128:
			return s.errf(p+".streams", "%d: between 1 and 128", w.Streams)
		case w.Flows < 0 || w.Flows > MaxFlows:
			return s.errf(p+".flows", "%d: between 1 and %d", w.Flows, MaxFlows)
		case w.Length < 0 || w.Length > 1<<20 || (w.Kind == UDPStream && w.Length > 65507):
			return s.errf(p+".length", "%d bytes: between 1 and %d", w.Length, map[bool]int{true: 65507, false: 1 << 20}[w.Kind == UDPStream])
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
		if w.Kind == Ping && w.Count == 0 {
			w.Count = 10
		}
		if w.Kind == Ping && w.Count < 2 {
			return s.errf(p+".count", "%d: at least 2 (the first reply and the steady ones)", w.Count)
		}
		if isHTTP(w.Kind) {
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
