package report

import "github.com/cnlab/cnlab/experiment/results"

// Metric describes one metric of results.json for figures and verdicts
// (package results holds the one registry).
type Metric = results.Metric

// MetricInfo describes a metric; an unknown one gets its name as label.
func MetricInfo(name string) Metric { return results.MetricInfo(name) }

// PrimaryMetrics are the metrics a workload is drawn and compared on, the
// first being its headline (results.PrimaryMetrics).
func PrimaryMetrics(kind string) []string { return results.PrimaryMetrics(kind) }

// figureMetrics are the primary metrics that get a figure of their own
// (transactions per second of tcp-rr is 1/latency: no figure).
func figureMetrics(kind string) []string {
	switch kind {
	case results.TCPRR, results.UDPRR:
		return []string{"latency_p50_us", "latency_p99_us"}
	case results.TCPRRUnderLoad: // the same figures as tcp-rr (one panel), and the load's
		return []string{"latency_p50_us", "latency_p99_us", "throughput_gbps"}
	}
	return PrimaryMetrics(kind)
}
