package experiment

import (
	"fmt"
	"io"
	"math"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/traffic"
)

// seriesSink receives a sample's per-second series from its workload
// (sampleEnv.series); a nil sink (the profiled run) keeps nothing.
type seriesSink struct{ s *results.Series }

// set keeps s (nil: the workload reported no seconds).
func (k *seriesSink) set(s *results.Series) {
	if k != nil {
		k.s = s
	}
}

// save writes the kept series into the results directory out and returns
// its file's name for the sample (Sample.Series); "" when there is none
// or it could not be written (the error is logged: the sample stands).
func (k *seriesSink) save(out, point string, repetition int, log io.Writer) string {
	if k == nil || k.s == nil || len(k.s.T) == 0 {
		return ""
	}
	name := results.SeriesName(point, repetition)
	if err := results.WriteSeries(out, name, k.s); err != nil {
		fmt.Fprintf(log, "series not kept: %v\n", err)
		return ""
	}
	return name
}

// iperf3Series adds up the flows' measured intervals (iperf3's -O
// seconds left out) second by second: the client's view, so the
// throughput is what the clients sent each second (docs/methodology.md);
// with --bidir, throughput_up_gbps is sent by the clients and
// throughput_down_gbps received by them, throughput_gbps their sum. UDP
// streams have sent_gbps only: the client sends and does not see what
// arrived. Flows that report different numbers of seconds are cut to
// the shortest.
func iperf3Series(rs []*traffic.Iperf3Result, udp, bidir bool) *results.Series {
	var per [][]traffic.Iperf3Interval
	n := -1
	for _, r := range rs {
		m := r.Measured()
		per = append(per, m)
		if n < 0 || len(m) < n {
			n = len(m)
		}
	}
	if n <= 0 {
		return nil
	}
	s := &results.Series{Values: map[string]results.Floats{}}
	col := func(name string) results.Floats {
		if s.Values[name] == nil {
			s.Values[name] = make(results.Floats, n)
		}
		return s.Values[name]
	}
	for i := range n {
		s.T = append(s.T, per[0][i].End)
		for _, m := range per {
			iv := m[i]
			switch {
			case udp:
				col("sent_gbps")[i] += iv.Bps / 1e9
			case bidir:
				col("throughput_up_gbps")[i] += iv.Bps / 1e9
				col("throughput_down_gbps")[i] += iv.ReverseBps / 1e9
				col("throughput_gbps")[i] += (iv.Bps + iv.ReverseBps) / 1e9
				col("retransmits")[i] += float64(iv.Retransmits)
			default:
				col("throughput_gbps")[i] += iv.Bps / 1e9
				col("retransmits")[i] += float64(iv.Retransmits)
			}
		}
	}
	return s
}

// rrSeries is cnlab rr's seconds as a sample's series: transactions per
// second, and the latency percentiles of the transactions completed in
// each second (none, NaN, in a second without one).
func rrSeries(r *traffic.RRSeries) *results.Series {
	if r == nil || len(r.T) == 0 || len(r.PerSecond) != len(r.T) || len(r.P50Us) != len(r.T) || len(r.P99Us) != len(r.T) || len(r.Transactions) != len(r.T) {
		return nil
	}
	n := len(r.T)
	s := &results.Series{T: append([]float64(nil), r.T...), Values: map[string]results.Floats{
		"transactions_per_s": append(results.Floats(nil), r.PerSecond...),
		"latency_p50_us":     make(results.Floats, n),
		"latency_p99_us":     make(results.Floats, n),
	}}
	for i := range n {
		p50, p99 := r.P50Us[i], r.P99Us[i]
		if r.Transactions[i] == 0 {
			p50, p99 = math.NaN(), math.NaN()
		}
		s.Values["latency_p50_us"][i], s.Values["latency_p99_us"][i] = p50, p99
	}
	return s
}

// httpSeries is cnlab http's seconds as a sample's series: requests
// completed per second (with a response or an error).
func httpSeries(r *traffic.HTTPSeries) *results.Series {
	if r == nil || len(r.T) == 0 || len(r.PerSecond) != len(r.T) {
		return nil
	}
	return &results.Series{T: append([]float64(nil), r.T...), Values: map[string]results.Floats{
		"requests_per_s": append(results.Floats(nil), r.PerSecond...),
	}}
}

// underLoadSeries gives the rr client (e) and the load streams (le) of a
// tcp-rr-under-load sample sinks of their own, as they run at once; the
// function it returns, called when both are done, keeps rr's seconds
// with the load's beside them (mergeSeries) in the sample's sink.
func underLoadSeries(e, le *sampleEnv) func() {
	sink := e.series
	if sink == nil {
		return func() {}
	}
	rr, load := &seriesSink{}, &seriesSink{}
	e.series, le.series = rr, load
	return func() { sink.set(mergeSeries(rr.s, load.s)) }
}

// mergeSeries adds extra's values to base's seconds, interval by
// interval (both start at the end of the same warm-up): cut to base's
// intervals, none (NaN) where extra has fewer. Values base has are kept.
func mergeSeries(base, extra *results.Series) *results.Series {
	if base == nil || extra == nil {
		return base
	}
	for name, vs := range extra.Values {
		if _, ok := base.Values[name]; ok {
			continue
		}
		col := make(results.Floats, len(base.T))
		for i := range col {
			col[i] = math.NaN()
			if i < len(vs) {
				col[i] = vs[i]
			}
		}
		base.Values[name] = col
	}
	return base
}
