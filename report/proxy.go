package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/stats"
)

// ProxyRow is what an L7 point's proxy adds over the L3/L4 path: the
// point's median p50 latency against that of the l4 point (an L3/L4
// allow, no proxy) of the same topology, datapath and workload.
type ProxyRow struct {
	Point    string `json:"point"`
	Base     string `json:"base"` // the l4 point
	Topology string `json:"topology"`
	Series   string `json:"series"`
	Workload string `json:"workload"`
	// Proxy is the proxy in the point's path: cnlab, or HAProxy (a
	// comparison series, not a datapath).
	Proxy   string  `json:"proxy"`
	P50Us   float64 `json:"p50Us"`
	BaseUs  float64 `json:"baseP50Us"`
	AddedUs float64 `json:"addedUs"`
	Times   float64 `json:"times"` // P50Us / BaseUs
	// CPUUsPerReq is the proxy's CPU per request (median), when measured.
	CPUUsPerReq float64 `json:"cpuUsPerReq,omitempty"`
	// For a cnlab row with a HAProxy point of the same parameters and
	// workload: its added p50 and CPU per request over HAProxy's (issue
	// 36's targets: at most 1.2 and 1.5).
	AddedVsHAProxy float64 `json:"addedVsHAProxy,omitempty"`
	CPUVsHAProxy   float64 `json:"cpuVsHAProxy,omitempty"`
}

// proxyNote says what HAProxy is in a run that has its points.
const proxyNote = "HAProxy (reference) is a comparison series, not a datapath: HAProxy 2.6 in the place of cnlab's L7 proxy, behind the same datapath's redirect, with the same rules, client and server (docs/l7.md, \"HAProxy as the reference\")."

// proxyTable lists, for every proxied L7 point (l7Mode http-any or
// rules) with an l4 point of the same lab and workload, what the proxy
// adds to the p50 latency.
func (rep *Report) proxyTable() {
	base := map[string]*results.PointResult{}
	key := func(p *results.PointResult) string {
		q := p.Params
		q.L7Mode, q.L7Rules, q.L7Match, q.L7Proxy = "", 0, "", ""
		return fmt.Sprintf("%+v %s", q, p.Workload.Name())
	}
	pts := rep.Results.Points
	for i := range pts {
		if pts[i].Params.L7Mode == results.L7L4 {
			base[key(&pts[i])] = &pts[i]
		}
	}
	haproxy := false
	for i := range pts {
		p := &pts[i]
		if p.Params.L7Mode != results.L7HTTPAny && p.Params.L7Mode != results.L7Rules {
			continue
		}
		b := base[key(p)]
		if b == nil {
			continue
		}
		xs, bs := samplesOf(p, "latency_p50_us"), samplesOf(b, "latency_p50_us")
		if len(xs) == 0 || len(bs) == 0 {
			continue
		}
		row := ProxyRow{Point: p.ID, Base: b.ID, Topology: p.Params.Topology, Series: p.Series, Workload: p.Workload.Name(),
			Proxy: "cnlab", P50Us: stats.Summarize(xs).Median, BaseUs: stats.Summarize(bs).Median}
		if p.Params.L7Proxy == results.L7ProxyHAProxy {
			row.Proxy, haproxy = results.HAProxyLabel, true
		}
		row.AddedUs = row.P50Us - row.BaseUs
		if row.BaseUs > 0 {
			row.Times = row.P50Us / row.BaseUs
		}
		if cs := samplesOf(p, "proxy_cpu_us_per_req"); len(cs) > 0 {
			row.CPUUsPerReq = stats.Summarize(cs).Median
		}
		rep.Proxy = append(rep.Proxy, row)
	}
	// Each cnlab row beside the HAProxy row of the same parameters.
	byKey := map[string]*ProxyRow{}
	for i := range rep.Proxy {
		if r := &rep.Proxy[i]; r.Proxy == results.HAProxyLabel {
			byKey[r.Topology+"|"+r.Workload+"|"+strings.TrimSuffix(r.Series, ", "+results.HAProxyLabel)] = r
		}
	}
	for i := range rep.Proxy {
		r := &rep.Proxy[i]
		h := byKey[r.Topology+"|"+r.Workload+"|"+r.Series]
		if r.Proxy != "cnlab" || h == nil {
			continue
		}
		if h.AddedUs > 0 {
			r.AddedVsHAProxy = r.AddedUs / h.AddedUs
		}
		if h.CPUUsPerReq > 0 {
			r.CPUVsHAProxy = r.CPUUsPerReq / h.CPUUsPerReq
		}
	}
	sort.SliceStable(rep.Proxy, func(i, j int) bool { return rep.Proxy[i].Point < rep.Proxy[j].Point })
	if haproxy {
		rep.Notes = append(rep.Notes, proxyNote)
	}
}
