package report

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

// TestProxyTable: each proxied L7 point is set against the l4 point of
// its datapath and workload (in another sweep too), HAProxy's as the
// reference, and the report says HAProxy is no datapath.
func TestProxyTable(t *testing.T) {
	pt := func(id, sweep, dp, mode, proxy string, p50s ...float64) results.PointResult {
		p := results.PointResult{Point: results.Point{ID: id, Sweep: sweep, Series: dp + " " + mode,
			Params:   results.Params{Topology: "single-host", Datapath: "ebpf", L7Mode: mode, L7Proxy: proxy},
			Workload: results.Workload{Kind: results.HTTP, Mode: "keepalive", Concurrency: 1}}}
		if dp == "nftables" {
			p.Params.Datapath = "nftables"
		}
		for _, v := range p50s {
			p.Samples = append(p.Samples, results.Sample{Metrics: map[string]float64{"latency_p50_us": v, "proxy_cpu_us_per_req": v / 2}})
		}
		return p
	}
	r := &results.Results{Points: []results.PointResult{
		pt("p1", "baselines", "ebpf", results.L7L4, "", 60, 70, 65),
		pt("p2", "baselines", "ebpf", results.L7HTTPAny, "", 300, 320, 310),
		pt("p3", "rules", "ebpf", results.L7Rules, results.L7ProxyHAProxy, 130, 120),
		pt("p4", "baselines", "nftables", results.L7HTTPAny, "", 400), // no l4 point of nftables
		pt("p5", "baselines", "ebpf", results.L7HTTPAny, results.L7ProxyHAProxy, 165, 170),
	}}
	r.Points[4].Series += ", " + results.HAProxyLabel
	rep := &Report{Results: r}
	rep.proxyTable()
	if len(rep.Proxy) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(rep.Proxy), rep.Proxy)
	}
	a, h := rep.Proxy[0], rep.Proxy[1]
	// p2 beside p5, HAProxy at the same point: 245 µs added against
	// 167.5 - 65, CPU 155 against 83.75.
	if want := 245 / (167.5 - 65); a.AddedVsHAProxy != want || a.CPUVsHAProxy != 155/83.75 {
		t.Errorf("cnlab row beside HAProxy: added %.3f (want %.3f), CPU %.3f (want %.3f)", a.AddedVsHAProxy, want, a.CPUVsHAProxy, 155/83.75)
	}
	if h.AddedVsHAProxy != 0 {
		t.Errorf("a HAProxy row is not set beside itself: %+v", h)
	}
	if a.Point != "p2" || a.Base != "p1" || a.Proxy != "cnlab" || a.P50Us != 310 || a.BaseUs != 65 || a.AddedUs != 245 || a.Times != 310.0/65 || a.CPUUsPerReq != 155 {
		t.Errorf("cnlab row %+v", a)
	}
	if h.Point != "p3" || h.Base != "p1" || h.Proxy != results.HAProxyLabel || h.AddedUs != 60 {
		t.Errorf("HAProxy row %+v", h)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "not a datapath") {
		t.Errorf("notes %q", rep.Notes)
	}
}
