// Package traffic generates and measures the workloads of experiments:
// iperf3 streams (driven and parsed here), cnlab's own request/response
// tool (tcp-rr, tcp-crr, udp-rr; netperf is not packaged), cnlab's own
// HTTP load (server and client; ApacheBench's output parsed to compare),
// and ping.
package traffic

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations with a bounded relative error, in the manner
// of an HDR histogram: values are grouped by their power of two, and each
// power of two is split into subBuckets linear buckets, so a recorded
// value is reported within 1/subBuckets (0.1%) of itself, from 1 ns to
// about 4.6 hours, in constant memory.
type Histogram struct {
	counts   []uint64
	n        uint64
	sum      float64
	min, max int64
}

const (
	subBits    = 10
	subBuckets = 1 << subBits // per power of two
	maxExp     = 44           // 2^44 ns ≈ 4.9 h
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, (maxExp+1)*subBuckets), min: math.MaxInt64}
}

func index(v int64) int {
	if v < subBuckets {
		return int(v) // exact below 1024 ns
	}
	e := bits.Len64(uint64(v)) - 1 - subBits // v >> e is in [subBuckets, 2*subBuckets)
	if e >= maxExp {
		return (maxExp+1)*subBuckets - 1
	}
	return (e+1)*subBuckets + int(v>>e) - subBuckets
}

// lowest returns the smallest value of bucket i.
func lowest(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	e := i/subBuckets - 1
	return int64(i%subBuckets+subBuckets) << e
}

// Record adds one observation (negative durations count as 0).
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[index(v)]++
	h.n++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

// Reset empties the histogram, keeping its memory.
func (h *Histogram) Reset() {
	clear(h.counts)
	h.n, h.sum, h.min, h.max = 0, 0, math.MaxInt64, 0
}

// Merge adds another histogram's observations.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Mean is the average observation.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Min and Max are the extreme observations (0 when empty).
func (h *Histogram) Min() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Max is the largest observation.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the value below which a fraction q (0..1) of the
// observations lie: the lowest value of the bucket holding the
// ceil(q*n)-th observation, clamped to the observed range.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(max(lowest(i), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
