package results

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Spec is an experiment file as parsed and validated (package experiment
// parses it), as results.json records it.
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
	Backend string `yaml:"-" json:"backend,omitempty"`
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
	// SeedValues are the numbers a seed study published for this sweep's
	// figures, drawn on the figures of their metric as a second, visibly
	// different series beside cnlab's (the quoted Reference stays in the
	// caption).
	SeedValues []SeedValues `yaml:"seedValues" json:"seedValues,omitempty"`
	// Cost adds, for each figure whose lines differ in Cost.Axis, one of
	// what each of its values costs against the same line with
	// Cost.Base (seed 003's overhead of flow visibility: observe against
	// off).
	Cost *Cost `yaml:"cost" json:"cost,omitempty"`
}

// Cost is a figure of the change each value of a matrix axis makes
// against a base value, in percent of the base line's median at the
// same x, signed so that a positive cost is worse (less throughput,
// more latency or CPU; the metric's Better).
type Cost struct {
	Axis string `yaml:"axis" json:"axis"` // a matrix key whose values name lines (observe)
	Base string `yaml:"base" json:"base"` // its value the others are measured against (off)
	// Reference is a range of costs someone else reported, drawn beside
	// cnlab's as a band (seed 003: "overhead of 1-15 %").
	Reference *Band `yaml:"reference" json:"reference,omitempty"`
}

// SeedValues are one table's or figure's published values of one metric,
// in the metric's unit (the file's comment says how the seed's own unit
// was converted), drawn as dashed lines with hollow markers (bars in a
// figure with nothing on its x axis), one per seed series, each named
// "Label: Series" in the legend.
type SeedValues struct {
	// Label names the seed and where it published the numbers: "seed 000
	// thesis, Fig. 7.2".
	Label  string `yaml:"label" json:"label"`
	Metric string `yaml:"metric" json:"metric"`
	// Topology and Workload, when set, keep the values to the figures of
	// that topology (single-host) and workload ("tcp-rr 100/200", "ab new
	// c10": the figure's workload as its title names it, or the kind
	// alone); unset, every figure of the metric in the sweep gets them.
	Topology string `yaml:"topology" json:"topology,omitempty"`
	Workload string `yaml:"workload" json:"workload,omitempty"`
	// Points are the published values. A point without x is drawn across
	// the figure as a dashed horizontal line (a value the seed gave for
	// no particular x: "the maximum"), or as a bar in a figure without x.
	Points []SeedPoint `yaml:"points" json:"points"`
}

// SeedPoint is one published value: Y (Low to High, when the seed gave a
// range, drawn as an error bar) of Series at X.
type SeedPoint struct {
	Series string `yaml:"series" json:"series"`
	// Line is cnlab's line (or bar) that stands for the seed's series,
	// drawn in its colour (its category, in a bar figure): "ebpf
	// legacy-routing" for the thesis's eBPF. Unset: the series' own name.
	Line string   `yaml:"line" json:"line,omitempty"`
	X    *float64 `yaml:"x" json:"x,omitempty"`
	Y    float64  `yaml:"y" json:"y"`
	Low  *float64 `yaml:"low" json:"low,omitempty"`
	High *float64 `yaml:"high" json:"high,omitempty"`
}

// Band is a range of a figure's y values with its label, in the
// figure's unit.
type Band struct {
	From  float64 `yaml:"from" json:"from"`
	To    float64 `yaml:"to" json:"to"`
	Label string  `yaml:"label" json:"label"`
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

// ClientCPU is the client's CPU (nil: not pinned, or no pin at all).
func (p *Pin) ClientCPU() *int {
	if p == nil {
		return nil
	}
	return p.Client
}

// ServerCPU is the server's CPU (nil: not pinned, or no pin at all).
func (p *Pin) ServerCPU() *int {
	if p == nil {
		return nil
	}
	return p.Server
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
	// TCPRRUnderLoad is tcp-rr while Streams TCP streams run through the
	// same path (flent's RRUL, adapted: docs/methodology.md "Latency
	// under load").
	TCPRRUnderLoad = "tcp-rr-under-load"
)

// WorkloadKinds are the workload kinds, in the order errors list them.
var WorkloadKinds = []string{TCPStream, UDPStream, TCPRR, TCPCRR, UDPRR, Ping, HTTP, AB, TCPRRUnderLoad}

// IsHTTP reports whether a workload kind sends HTTP requests (to
// experiment.HTTPPort).
func IsHTTP(k string) bool { return k == HTTP || k == AB }

// Workload is one measurement made at every point.
type Workload struct {
	Kind         string `yaml:"kind" json:"kind"`
	Flows        int    `yaml:"flows" json:"flows,omitempty"`               // streams: iperf3 client/server pairs at once (matrix flows)
	Streams      int    `yaml:"streams" json:"streams,omitempty"`           // streams: parallel streams of each (iperf3 -P); tcp-rr-under-load: the load streams
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
	// Bidirectional (tcp-stream): both directions at once (iperf3
	// --bidir, 3.7 and later); throughput_gbps is then their sum, with
	// throughput_up_gbps and throughput_down_gbps each direction's.
	Bidirectional bool `yaml:"bidirectional" json:"bidirectional,omitempty"`
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
		if w.Bidirectional {
			parts = append(parts, "bidir")
		}
	case TCPRR, TCPCRR, UDPRR:
		parts = append(parts, fmt.Sprintf("%d/%d", w.RequestSize, w.ResponseSize))
	case TCPRRUnderLoad:
		parts = append(parts, fmt.Sprintf("%d/%d", w.RequestSize, w.ResponseSize), fmt.Sprintf("%dstreams", w.Streams))
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
