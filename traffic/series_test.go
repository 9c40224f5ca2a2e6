package traffic

import (
	"math"
	"os"
	"testing"
	"time"
)

// TestIperf3Intervals reads the per-second reports of recordings from
// iperf3 3.12 on loopback:
//
//	iperf3 -c 127.0.0.1 -t 3 -O 1 -J                  iperf3-tcp-omit.json
//	iperf3 -c 127.0.0.1 -t 3 -O 1 -P 2 --bidir -J     iperf3-tcp-bidir-P2-omit.json
func TestIperf3Intervals(t *testing.T) {
	read := func(name string) *Iperf3Result {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseIperf3(b)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := read("iperf3-tcp-omit.json")
	if len(r.Intervals) != 4 || !r.Intervals[0].Omitted || r.Intervals[1].Omitted || r.Bidir != nil {
		t.Fatalf("intervals: %+v", r.Intervals)
	}
	m := r.Measured()
	// Values as in the file: the omitted second is gone, the times start at 0.
	if len(m) != 3 || m[0].Start != 0 || math.Abs(m[2].End-(3.002193-4.3e-05)) > 1e-9 ||
		m[0].Bps != 3168152135.4731083 || m[0].Retransmits != 10 || m[2].Retransmits != 8 || m[0].ReverseBps != 0 {
		t.Errorf("measured: %+v", m)
	}
	retrans := 0
	for _, iv := range m {
		retrans += iv.Retransmits
	}
	if retrans != r.Retransmits {
		t.Errorf("the measured seconds' retransmits add up to %d, the total is %d", retrans, r.Retransmits)
	}
	// Unchanged: Measured copies.
	if r.Intervals[1].Start != 4.3e-05 {
		t.Errorf("Measured changed the intervals: %+v", r.Intervals[1])
	}

	b := read("iperf3-tcp-bidir-P2-omit.json")
	if b.Bidir == nil || b.Streams != 2 {
		t.Fatalf("bidir: %+v", b)
	}
	if b.ReceivedBps != 2456656439.6125884 || b.Bidir.ReceivedBps != 3274612160.2102513 || b.Bidir.SentBps != 3250186910.405657 ||
		b.Retransmits != 23 || b.Bidir.Retransmits != 34 {
		t.Errorf("bidir totals: %+v, reverse %+v", b, *b.Bidir)
	}
	m = b.Measured()
	if len(m) != 3 || m[1].Bps != 1856024102.9459124 || m[1].ReverseBps != 3955323681.5321927 || m[1].Retransmits != 6 {
		t.Errorf("bidir measured: %+v", m)
	}
	// A report without intervals (an old recording) has none.
	if u := read("iperf3-udp.json"); len(u.Measured()) == 0 {
		t.Errorf("udp: no intervals")
	}
}

// TestRRBuckets cuts transactions into seconds by their completion.
func TestRRBuckets(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newRRBuckets(t0, 3500*time.Millisecond) // 4 buckets, the last half a second
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for i := range 100 { // second 0: latencies 1..100 µs
		b.record(at(i*5), time.Duration(i+1)*time.Microsecond)
	}
	// second 1: nothing; second 2: two; second 3 (half): one, and one
	// that completed after the measured time
	b.record(at(2100), 10*time.Microsecond)
	b.record(at(2900), 30*time.Microsecond)
	b.record(at(3200), 7*time.Microsecond)
	b.record(at(3700), 9*time.Microsecond)
	s := b.series()
	want := []float64{1, 2, 3, 3.5}
	if len(s.T) != 4 || len(s.Transactions) != 4 || len(s.PerSecond) != 4 || len(s.P50Us) != 4 || len(s.P99Us) != 4 {
		t.Fatalf("series: %+v", s)
	}
	for i, w := range want {
		if s.T[i] != w {
			t.Errorf("t[%d] = %g, want %g", i, s.T[i], w)
		}
	}
	if s.Transactions[0] != 100 || s.Transactions[1] != 0 || s.Transactions[2] != 2 || s.Transactions[3] != 2 {
		t.Errorf("transactions: %v", s.Transactions)
	}
	if s.PerSecond[0] != 100 || s.PerSecond[3] != 4 { // 2 in half a second
		t.Errorf("per second: %v", s.PerSecond)
	}
	near := func(v, w float64) bool { return math.Abs(v-w) <= w/1000 } // the histogram's 0.1%
	if !near(s.P50Us[0], 50) || !near(s.P99Us[0], 99) || s.P50Us[1] != 0 || s.P99Us[1] != 0 || s.P50Us[2] != 10 || s.P99Us[2] != 30 || s.P50Us[3] != 7 {
		t.Errorf("p50 %v p99 %v", s.P50Us, s.P99Us)
	}
	// A run with no transaction at all still has its seconds.
	if e := newRRBuckets(t0, 2*time.Second).series(); len(e.T) != 2 || e.Transactions[1] != 0 {
		t.Errorf("empty: %+v", e)
	}
}

// TestRRBucketsNoAllocation: recording a transaction allocates nothing.
func TestRRBucketsNoAllocation(t *testing.T) {
	t0 := time.Now()
	b := newRRBuckets(t0, time.Hour)
	n := testing.AllocsPerRun(1000, func() { b.record(t0.Add(time.Millisecond), time.Microsecond) })
	if n != 0 {
		t.Errorf("%g allocations per transaction", n)
	}
}

// TestHTTPSeries adds up the workers' seconds, the last one shorter.
func TestHTTPSeries(t *testing.T) {
	ws := []*httpWorker{{perSec: []uint64{10, 20, 4}}, {perSec: []uint64{5}}}
	s := httpSeries(ws, 2500*time.Millisecond)
	if len(s.T) != 3 || s.T[2] != 2.5 || s.Requests[0] != 15 || s.Requests[2] != 4 || s.PerSecond[1] != 20 || s.PerSecond[2] != 8 {
		t.Errorf("series: %+v", s)
	}
	// A request that completed at the run's very end counts in its last second.
	if s := httpSeries([]*httpWorker{{perSec: []uint64{1, 1, 1}}}, 2*time.Second); len(s.T) != 2 || s.Requests[1] != 2 {
		t.Errorf("end: %+v", s)
	}
}

// BenchmarkRRRecord is what a transaction costs the sample's histogram
// alone, and with the per-second buckets besides.
func BenchmarkRRRecord(b *testing.B) {
	t0 := time.Now()
	h := NewHistogram()
	b.Run("histogram", func(b *testing.B) {
		for i := range b.N {
			h.Record(time.Duration(20000 + i%1000))
		}
	})
	sec := newRRBuckets(t0, time.Hour)
	b.Run("histogram+seconds", func(b *testing.B) {
		for i := range b.N {
			d := time.Duration(20000 + i%1000)
			h.Record(d)
			sec.record(t0.Add(time.Duration(i)*20*time.Microsecond%time.Hour), d)
		}
	})
}
