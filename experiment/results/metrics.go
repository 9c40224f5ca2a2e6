package results

import "strings"

// Metric describes one metric of results.json: its unit, which way is
// better, and its label on figures and in verdicts.
type Metric struct {
	Name   string  // as in results.json
	Label  string  // axis label
	Unit   string  // after a number in a sentence
	Better int     // +1 higher is better, -1 lower is better, 0 neither
	Max    float64 // the largest possible value (100 for a share in percent); 0: none
	// NoFigure: a sweep cannot ask a figure of it (figures.metrics).
	NoFigure bool
}

// metricList is the one registry of the metrics the workloads record, in
// the order errors list them.
var metricList = []Metric{
	{Name: "throughput_gbps", Label: "throughput (Gb/s)", Unit: "Gb/s", Better: +1},
	{Name: "sent_gbps", Label: "sent (Gb/s)", Unit: "Gb/s", Better: +1},
	// A bidirectional tcp-stream: each direction's received throughput
	// (client to server, server to client); throughput_gbps is their sum.
	{Name: "throughput_up_gbps", Label: "throughput client→server (Gb/s)", Unit: "Gb/s", Better: +1},
	{Name: "throughput_down_gbps", Label: "throughput server→client (Gb/s)", Unit: "Gb/s", Better: +1},
	{Name: "packets_per_s", Label: "received packets per second", Unit: "/s", Better: +1},
	// What the server's namespace received over the sample, counted by
	// its interfaces (skbs: one per GRO/GSO packet, the packets netfilter
	// and eBPF traverse), per second of the window around the clients.
	{Name: "skb_per_s", Label: "packets per second at the server (skbs)", Unit: "/s", Better: +1},
	{Name: "retransmits", Label: "TCP retransmits", Better: -1},
	{Name: "loss_pct", Label: "loss (%)", Unit: "%", Better: -1, Max: 100},
	{Name: "jitter_ms", Label: "jitter (ms)", Unit: "ms", Better: -1},
	{Name: "transactions_per_s", Label: "transactions per second", Unit: "/s", Better: +1},
	{Name: "latency_mean_us", Label: "mean latency (µs)", Unit: "µs", Better: -1},
	{Name: "latency_p50_us", Label: "p50 latency (µs)", Unit: "µs", Better: -1},
	{Name: "latency_p90_us", Label: "p90 latency (µs)", Unit: "µs", Better: -1},
	{Name: "latency_p99_us", Label: "p99 latency (µs)", Unit: "µs", Better: -1},
	{Name: "latency_p999_us", Label: "p99.9 latency (µs)", Unit: "µs", Better: -1},
	{Name: "connect_p50_us", Label: "p50 connect latency (µs)", Unit: "µs", Better: -1},
	{Name: "connect_p99_us", Label: "p99 connect latency (µs)", Unit: "µs", Better: -1},
	{Name: "first_rtt_us", Label: "first-packet RTT (µs)", Unit: "µs", Better: -1},
	{Name: "rtt_us", Label: "steady RTT (µs)", Unit: "µs", Better: -1},
	{Name: "timeouts", Label: "timeouts", Better: -1, NoFigure: true},
	{Name: "sender_cpu_pct", Label: "sender CPU (%)", Unit: "%", Better: -1},
	{Name: "receiver_cpu_pct", Label: "receiver CPU (%)", Unit: "%", Better: -1},
	{Name: "client_cpu_pct", Label: "client CPU (%)", Unit: "%", Better: -1},
	{Name: "system_cpu_pct", Label: "machine CPU (%)", Unit: "%", Better: -1},
	// On a cluster: system_cpu_pct is the client's node, this the server's.
	{Name: "server_system_cpu_pct", Label: "server node CPU (%)", Unit: "%", Better: -1},
	// Service demand (netperf's): the machine's busy CPU time (every
	// core; both nodes on a cluster) over the clients' window, divided by
	// the skbs the server received (streams) or the transactions
	// completed (rr, crr: a crr transaction is a connection).
	{Name: "cpu_us_per_packet", Label: "CPU time per packet (µs)", Unit: "µs", Better: -1},
	{Name: "cpu_us_per_transaction", Label: "CPU time per transaction (µs)", Unit: "µs", Better: -1},
	{Name: "requests_per_s", Label: "HTTP requests per second", Unit: "/s", Better: +1},
	{Name: "unexpected", Label: "unexpected statuses and errors", Better: -1},
	{Name: "errors", Label: "requests without a response", Better: -1},
	{Name: "proxy_cpu_pct", Label: "L7 proxy CPU (%)", Unit: "%", Better: -1},
	// The proxy's CPU time over the sample divided by the requests the
	// client completed (HAProxy's at an l7Proxy haproxy point).
	{Name: "proxy_cpu_us_per_req", Label: "L7 proxy CPU per request (µs)", Unit: "µs", Better: -1},
}

var metricsByName = func() map[string]Metric {
	m := map[string]Metric{}
	for _, x := range metricList {
		m[x.Name] = x
	}
	return m
}()

// MetricInfo describes a metric; an unknown one gets its name as label.
func MetricInfo(name string) Metric {
	if m, ok := metricsByName[name]; ok {
		return m
	}
	return Metric{Name: name, Label: strings.ReplaceAll(name, "_", " ")}
}

// FigureMetrics are the metrics a sweep may ask figures of
// (figures.metrics, figures.reference).
var FigureMetrics = func() []string {
	var out []string
	for _, m := range metricList {
		if !m.NoFigure {
			out = append(out, m.Name)
		}
	}
	return out
}()

// primary are each workload's metrics that it is drawn and compared on,
// the first being its headline: the figure the run summary prints, the
// one --precision judges and the report's findings are about.
var primary = map[string][]string{
	TCPStream: {"throughput_gbps"},
	UDPStream: {"throughput_gbps", "loss_pct"},
	TCPRR:     {"latency_p50_us", "latency_p99_us", "transactions_per_s"},
	UDPRR:     {"latency_p50_us", "latency_p99_us", "transactions_per_s"},
	TCPCRR:    {"transactions_per_s", "latency_p50_us", "connect_p50_us", "connect_p99_us"},
	Ping:      {"first_rtt_us", "rtt_us"},
	HTTP:      {"requests_per_s", "latency_p50_us", "latency_p99_us"},
	AB:        {"requests_per_s", "latency_p50_us", "latency_p99_us"},
	// The rr latency under load, then what the load streams carried
	// (docs/methodology.md "Latency under load").
	TCPRRUnderLoad: {"latency_p50_us", "latency_p99_us", "throughput_gbps"},
}

// PrimaryMetrics are the metrics a workload kind is drawn and compared
// on, the first being its headline (nil for an unknown kind).
func PrimaryMetrics(kind string) []string { return primary[kind] }

// Headline is a workload kind's headline metric ("" for an unknown kind).
func Headline(kind string) string {
	if ms := primary[kind]; len(ms) > 0 {
		return ms[0]
	}
	return ""
}

// Clamp limits an interval to the values the metric can take: every
// metric is ≥ 0, a share at most 100%. A Student's t interval of two
// samples is ±12.7 standard errors and reaches past both.
func (m Metric) Clamp(lo, hi float64) (float64, float64) {
	lo = max(lo, 0)
	if m.Max > 0 {
		hi = min(hi, m.Max)
	}
	return lo, hi
}

// MetricNames are the registered metrics, in the registry's order.
func MetricNames() []string {
	out := make([]string, len(metricList))
	for i, m := range metricList {
		out[i] = m.Name
	}
	return out
}
