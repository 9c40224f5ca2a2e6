package plot

import (
	"math"
)

// exampleFigures are the figures the tests render: one of each kind cnlab's
// report draws, then degenerate inputs.
func exampleFigures() map[string]*Figure {
	policies := []float64{0, 10, 100, 500, 1000, 2000, 5000, 10000}
	type dp struct {
		name       string
		base, cost float64
	}
	var lines []Series
	for i, d := range []dp{
		{"iptables (legacy)", 9.4, 0.00075},
		{"nftables", 9.2, 0.00030},
		{"eBPF tc", 9.6, 0.00002},
		{"eBPF XDP redirect", 11.8, 0.00001},
	} {
		s := Series{Name: d.name}
		for j, n := range policies {
			y := d.base / (1 + d.cost*n)
			ci := 0.15 + 0.05*float64((i+j)%3)
			s.Points = append(s.Points, Point{X: n, Y: y, YLow: y - ci, YHigh: y + ci})
		}
		lines = append(lines, s)
	}

	cats := []string{"veth + bridge", "iptables-legacy", "nftables", "ebpf-tc", "ebpf-xdp", "ipvs"}
	bar := func(name string, vals []float64, ci float64) Series {
		s := Series{Name: name}
		for i, v := range vals {
			s.Points = append(s.Points, Point{X: float64(i), Y: v, YLow: v - ci, YHigh: v + ci})
		}
		return s
	}

	chain := Series{Name: "measured (mean, 95% CI)", Style: MarkersOnly}
	fit := Series{Name: "fit: 9.8 / (1 + 0.11·n)", Style: DashedLine, Color: PaletteColor(0)}
	for n := 1; n <= 16; n++ {
		y := 9.8/(1+0.11*float64(n)) + 0.2*math.Sin(float64(n))
		chain.Points = append(chain.Points, Point{X: float64(n), Y: y, YLow: y - 0.25, YHigh: y + 0.25})
	}
	for k := 0; k <= 60; k++ {
		n := 1 + 15*float64(k)/60
		fit.Points = append(fit.Points, Point{X: n, Y: 9.8 / (1 + 0.11*n)})
	}

	// Services 1 to 10,000 on a log axis, with a fitted line sampled
	// evenly in log x (a straight line in x is a curve on this axis).
	services := []float64{1, 10, 100, 1000, 10000}
	ipt := Series{Name: "iptables", Color: PaletteColor(0)}
	ebpf := Series{Name: "ebpf", Color: PaletteColor(1)}
	for _, n := range services {
		y := 60 + 0.012*n
		ipt.Points = append(ipt.Points, Point{X: n, Y: y, YLow: y - 3, YHigh: y + 3})
		ebpf.Points = append(ebpf.Points, Point{X: n, Y: 55, YLow: 53, YHigh: 57})
	}
	iptFit := Series{Name: "fitted line", Style: DashedLine, Color: PaletteColor(0)}
	for _, n := range LogSpace(1, 10000, 81) {
		iptFit.Points = append(iptFit.Points, Point{X: n, Y: 60 + 0.012*n})
	}

	return map[string]*Figure{
		"services-log": {
			ID:     "fig-services-log",
			Title:  "Connect latency vs number of services",
			XLabel: "number of services (log scale)",
			YLabel: "p50 latency (µs)",
			Note:   "x axis: log scale. Dashed: a line fitted in linear x, drawn as the curve it is on a log axis.",
			XLog:   true,
			Series: []Series{ipt, iptFit, ebpf},
		},
		"throughput-vs-policies": {
			ID:     "fig-policies",
			Title:  "TCP throughput vs number of policies",
			XLabel: "policies installed",
			YLabel: "throughput (Gbit/s)",
			Note:   "Mean of 10 runs; error bars are 95% confidence intervals. Host: 8 cores, kernel 6.x.",
			Series: lines,
		},
		"baselines-bars": {
			ID:         "fig-baselines",
			Kind:       Bars,
			Title:      "Baseline throughput by datapath",
			XLabel:     "datapath",
			YLabel:     "throughput (Gbit/s)",
			Categories: cats,
			Series: []Series{
				bar("MTU 1500", []float64{9.1, 8.7, 8.9, 9.4, 11.2, 8.8}, 0.3),
				bar("MTU 9000", []float64{21.5, 19.8, 20.3, 23.0, 27.4, 19.1}, 0.6),
			},
			HLines: []RefLine{{Value: 25, Label: "NIC line rate 25 Gbit/s"}},
		},
		"chain-length": {
			ID:     "fig-chain",
			Title:  "Throughput vs service chain length",
			XLabel: "chain length (hops)",
			YLabel: "throughput (Gbit/s)",
			Series: []Series{chain, fit},
			Note:   "Dashed: least-squares fit.",
		},
		"empty": {
			ID: "fig-empty", Title: "Nothing measured", XLabel: "x", YLabel: "y",
			Series: []Series{{Name: "empty series"}},
		},
		"single-point": {
			ID: "fig-single", Title: "One point", XLabel: "x", YLabel: "y",
			Series: []Series{{Name: "only", Points: []Point{{X: 3, Y: 7, YLow: 6, YHigh: 8}}}},
		},
		"all-equal": {
			ID: "fig-equal", Title: "Constant series", XLabel: "x", YLabel: "y", YFromData: true,
			Series: []Series{{Name: "flat", Points: []Point{{X: 1, Y: 5}, {X: 2, Y: 5}, {X: 3, Y: 5}}}},
		},
		"nan-inf-negative": {
			ID: "fig-nan", Title: "Bad values & <negatives>", XLabel: "x \"quoted\"", YLabel: "delta & change",
			VLines: []RefLine{{Value: 0, Label: "origin"}},
			Series: []Series{
				{Name: "a<b>&c", Points: []Point{{X: -2, Y: -5}, {X: -1, Y: math.NaN()}, {X: 0, Y: 1}, {X: math.Inf(1), Y: 2}, {X: 1, Y: 3.5}, {X: 2, Y: math.Inf(-1)}, {X: 3, Y: -1.5}}},
				{Name: "second", Style: LineOnly, Points: []Point{{X: -2, Y: 4}, {X: 3, Y: -4}}},
			},
		},
		"huge-values": {
			ID: "fig-huge", Title: "Packets per second", XLabel: "flows", YLabel: "pps",
			Series: []Series{{Name: "pps", Points: []Point{{X: 1000, Y: 1.2e6}, {X: 50000, Y: 3.4e6}, {X: 250000, Y: 2.9e6}}}},
		},
		"tiny-values": {
			ID: "fig-tiny", Title: "Per-packet cost", XLabel: "rules", YLabel: "seconds",
			Series: []Series{{Name: "cost", Points: []Point{{X: 0, Y: 1.2e-6}, {X: 10, Y: 4.5e-6}, {X: 20, Y: 9.1e-6}}}},
		},
		"long-names": {
			ID: "fig-long", Title: "A rather long figure title that goes on and on to check that wrapping onto a second line works in the layout", XLabel: "x", YLabel: "y",
			Series: []Series{
				{Name: "a datapath with an exceedingly long descriptive name that must be truncated in the legend", Points: []Point{{X: 0, Y: 1}, {X: 1, Y: 2}, {X: 2, Y: 1.5}}},
				{Name: "short", Points: []Point{{X: 0, Y: 2}, {X: 1, Y: 1}, {X: 2, Y: 2.5}}},
			},
		},
		"many-series": manySeries(),
		"bars-crowded": {
			ID: "fig-crowded", Kind: Bars, Title: "Latency change vs baseline", XLabel: "datapath", YLabel: "Δ p99 latency (µs)",
			Categories: []string{"cilium-ebpf-hostrouting", "calico-iptables", "calico-ebpf", "flannel-vxlan", "kube-router-ipvs", "weave-net-fastdp", "antrea-ovs", "bare veth"},
			Series: []Series{
				bar("1 flow", []float64{-3.5, 12, 1.2, 8.8, 4.1, 15.2, 6.3, 0}, 1.1),
				bar("64 flows", []float64{-1.2, 25.3, 3.3, 14.9, 9.9, 31.0, 11.1, 0.4}, 2.0),
				bar("1024 flows", []float64{2.2, 48.0, 5.9, 22.0, 18.7, 57.3, 20.5, 1.1}, 3.5),
			},
		},
		"categorical-lines": {
			ID: "fig-catlines", Title: "Requests/s by message size", XLabel: "message size", YLabel: "requests/s",
			Categories: []string{"64 B", "512 B", "4 KiB", "32 KiB", "256 KiB"},
			Series: []Series{
				{Name: "veth", Points: []Point{{X: 0, Y: 52000}, {X: 1, Y: 50500}, {X: 2, Y: 43000}, {X: 3, Y: 21000}, {X: 4, Y: 4100}}},
				{Name: "ebpf", Style: MarkersOnly, Points: []Point{{X: 0, Y: 61000}, {X: 1, Y: 60100}, {X: 2, Y: 52000}, {X: 3, Y: 24800}, {X: 4, Y: 4700}}},
			},
		},
	}
}

func manySeries() *Figure {
	f := &Figure{ID: "fig-many", Title: "Ten series", XLabel: "x", YLabel: "y", Legend: LegendBelow}
	for i := range 10 {
		s := Series{Name: "series " + string(rune('A'+i))}
		for x := range 6 {
			s.Points = append(s.Points, Point{X: float64(x), Y: float64(i) + float64(x)*0.3})
		}
		f.Series = append(f.Series, s)
	}
	return f
}
