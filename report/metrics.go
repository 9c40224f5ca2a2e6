package report

import (
	"strings"

	"github.com/cnlab/cnlab/experiment"
)

// Metric describes one metric of results.json for figures and verdicts.
type Metric struct {
	Name   string  // as in results.json
	Label  string  // axis label
	Unit   string  // after a number in a sentence
	Better int     // +1 higher is better, -1 lower is better, 0 neither
	Max    float64 // the largest possible value (100 for a share in percent); 0: none
}

var metrics = map[string]Metric{
	"throughput_gbps":    {"throughput_gbps", "throughput (Gb/s)", "Gb/s", +1, 0},
	"sent_gbps":          {"sent_gbps", "sent (Gb/s)", "Gb/s", +1, 0},
	"packets_per_s":      {"packets_per_s", "received packets per second", "/s", +1, 0},
	"retransmits":        {"retransmits", "TCP retransmits", "", -1, 0},
	"loss_pct":           {"loss_pct", "loss (%)", "%", -1, 100},
	"jitter_ms":          {"jitter_ms", "jitter (ms)", "ms", -1, 0},
	"transactions_per_s": {"transactions_per_s", "transactions per second", "/s", +1, 0},
	"latency_mean_us":    {"latency_mean_us", "mean latency (µs)", "µs", -1, 0},
	"latency_p50_us":     {"latency_p50_us", "p50 latency (µs)", "µs", -1, 0},
	"latency_p90_us":     {"latency_p90_us", "p90 latency (µs)", "µs", -1, 0},
	"latency_p99_us":     {"latency_p99_us", "p99 latency (µs)", "µs", -1, 0},
	"latency_p999_us":    {"latency_p999_us", "p99.9 latency (µs)", "µs", -1, 0},
	"connect_p50_us":     {"connect_p50_us", "p50 connect latency (µs)", "µs", -1, 0},
	"connect_p99_us":     {"connect_p99_us", "p99 connect latency (µs)", "µs", -1, 0},
	"first_rtt_us":       {"first_rtt_us", "first-packet RTT (µs)", "µs", -1, 0},
	"rtt_us":             {"rtt_us", "steady RTT (µs)", "µs", -1, 0},
	"timeouts":           {"timeouts", "timeouts", "", -1, 0},
	"sender_cpu_pct":     {"sender_cpu_pct", "sender CPU (%)", "%", -1, 0},
	"receiver_cpu_pct":   {"receiver_cpu_pct", "receiver CPU (%)", "%", -1, 0},
	"client_cpu_pct":     {"client_cpu_pct", "client CPU (%)", "%", -1, 0},
	"system_cpu_pct":     {"system_cpu_pct", "machine CPU (%)", "%", -1, 0},
	// On a cluster: system_cpu_pct is the client's node, this the server's.
	"server_system_cpu_pct": {"server_system_cpu_pct", "server node CPU (%)", "%", -1, 0},
	"requests_per_s":        {"requests_per_s", "HTTP requests per second", "/s", +1, 0},
	"unexpected":            {"unexpected", "unexpected statuses and errors", "", -1, 0},
	"errors":                {"errors", "requests without a response", "", -1, 0},
	"proxy_cpu_pct":         {"proxy_cpu_pct", "L7 proxy CPU (%)", "%", -1, 0},
}

// MetricInfo describes a metric; an unknown one gets its name as label.
func MetricInfo(name string) Metric {
	if m, ok := metrics[name]; ok {
		return m
	}
	return Metric{Name: name, Label: strings.ReplaceAll(name, "_", " ")}
}

// PrimaryMetrics are the metrics a workload is drawn and compared on, the
// first being its headline.
func PrimaryMetrics(kind string) []string {
	switch kind {
	case experiment.TCPStream:
		return []string{"throughput_gbps"}
	case experiment.UDPStream:
		return []string{"throughput_gbps", "loss_pct"}
	case experiment.TCPRR, experiment.UDPRR:
		return []string{"latency_p50_us", "latency_p99_us", "transactions_per_s"}
	case experiment.TCPCRR:
		return []string{"transactions_per_s", "latency_p50_us", "connect_p50_us", "connect_p99_us"}
	case experiment.Ping:
		return []string{"first_rtt_us", "rtt_us"}
	case experiment.HTTP, experiment.AB:
		return []string{"requests_per_s", "latency_p50_us", "latency_p99_us"}
	}
	return nil
}

// figureMetrics are the primary metrics that get a figure of their own
// (transactions per second of tcp-rr is 1/latency: no figure).
func figureMetrics(kind string) []string {
	switch kind {
	case experiment.TCPRR, experiment.UDPRR:
		return []string{"latency_p50_us", "latency_p99_us"}
	}
	return PrimaryMetrics(kind)
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
