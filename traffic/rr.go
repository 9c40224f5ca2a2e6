package traffic

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Request/response modes, as netperf names its tests.
const (
	TCPRR  = "tcp-rr"  // one connection, back-to-back transactions
	TCPCRR = "tcp-crr" // a new connection per transaction
	UDPRR  = "udp-rr"  // one datagram each way per transaction
)

// RRModes lists the request/response modes.
var RRModes = []string{TCPRR, TCPCRR, UDPRR}

// RRConfig is one request/response run. Client and server must agree on
// the mode and sizes (the experiment runner starts both with the same
// config); a client that does not fails with an error naming the likely
// disagreement (see rrdiag.go). Until its first transaction, for up to a
// second, a client retries a refused connection or datagram: its server
// may still be starting.
type RRConfig struct {
	Mode         string
	Addr         string        // server address, host:port
	RequestSize  int           // bytes per request (netperf's default: 1)
	ResponseSize int           // bytes per response (netperf's default: 1)
	Duration     time.Duration // measured time
	Warmup       time.Duration // transactions before it are not counted

	// Timeout (0: 1 s) is how long a udp-rr transaction waits for its
	// response before it counts as lost. TCP modes never give up on a
	// slow transaction: they check ctx and the run's end every Timeout
	// and end the run with an error only after stallTimeouts (10)
	// Timeouts in a row without a byte moving.
	Timeout time.Duration
	// ConnectTimeout (0: 5 s) bounds each TCP connect: a SYN dropped by a
	// policy would otherwise be retried by the kernel for minutes.
	ConnectTimeout time.Duration
}

// RRConfig's default timeouts, and how many Timeouts without progress end
// a TCP run.
const (
	defaultTimeout        = time.Second
	defaultConnectTimeout = 5 * time.Second
	stallTimeouts         = 10
)

// Check validates a config.
func (c RRConfig) Check() error {
	switch {
	case !slices.Contains(RRModes, c.Mode):
		return fmt.Errorf("mode %q: one of %s", c.Mode, strings.Join(RRModes, ", "))
	case c.RequestSize < 1 || c.RequestSize > 65000:
		return fmt.Errorf("request size %d: 1 to 65000 bytes", c.RequestSize)
	case c.ResponseSize < 1 || c.ResponseSize > 65000:
		return fmt.Errorf("response size %d: 1 to 65000 bytes", c.ResponseSize)
	case c.Duration <= 0:
		return errors.New("duration must be positive")
	case c.Warmup < 0:
		return errors.New("warm-up cannot be negative")
	case c.Timeout < 0:
		return errors.New("timeout cannot be negative")
	case c.ConnectTimeout < 0:
		return errors.New("connect timeout cannot be negative")
	}
	return nil
}

// Latency is a latency summary in microseconds.
type Latency struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// RRResult is what a request/response client measured. The measured time
// runs from the end of the warm-up to the completion of the last
// transaction or the end of the run, whichever is earlier: a trailing lost
// datagram's wait is not in it.
type RRResult struct {
	Mode         string  `json:"mode"`
	RequestSize  int     `json:"requestSize"`
	ResponseSize int     `json:"responseSize"`
	Seconds      float64 `json:"seconds"`      // measured time
	Transactions uint64  `json:"transactions"` // started after the warm-up and completed
	PerSecond    float64 `json:"transactionsPerSecond"`
	LatencyUs    Latency `json:"latencyUs"`
	// ConnectUs (tcp-crr) is the connect alone: from connect() to the
	// connection established (the SYN-ACK back), per transaction.
	ConnectUs *Latency `json:"connectUs,omitempty"`
	Timeouts  uint64   `json:"timeouts,omitempty"` // udp-rr: lost request or response, after the warm-up
	// Series is the measured time second by second.
	Series *RRSeries `json:"series,omitempty"`
}

// RRSeries is a run's measured time cut into seconds: each transaction
// counts in the second in which it completed (one that completed after
// the measured time, in the last). The arrays are aligned, one entry per
// second; the last second is shorter when the duration is not whole
// seconds. A second in which no transaction completed has 0 transactions
// and latencies of 0 (no latency was measured in it).
type RRSeries struct {
	T            []float64 `json:"t"`            // end of each second, from the start of the measured time
	Transactions []uint64  `json:"transactions"` // completed in that second
	PerSecond    []float64 `json:"transactionsPerSecond"`
	P50Us        []float64 `json:"p50Us"`
	P99Us        []float64 `json:"p99Us"`
}

// rrBuckets cuts a run's transactions into seconds: one histogram,
// emptied at each second's end, so a transaction costs a Record and no
// allocation (a second's summary appends to the series once per second).
type rrBuckets struct {
	from     time.Time     // start of the measured time
	duration time.Duration // of the measured time
	cur      int           // the second being filled
	h        *Histogram
	s        RRSeries
}

func newRRBuckets(from time.Time, duration time.Duration) *rrBuckets {
	return &rrBuckets{from: from, duration: duration, h: NewHistogram()}
}

// seconds is how many buckets the measured time has.
func (b *rrBuckets) seconds() int { return max(int((b.duration+time.Second-1)/time.Second), 1) }

// record counts a transaction of latency d that completed at t (a
// measured one: not before from).
func (b *rrBuckets) record(t time.Time, d time.Duration) {
	k := min(int(t.Sub(b.from)/time.Second), b.seconds()-1)
	for b.cur < k {
		b.flush()
	}
	b.h.Record(d)
}

// flush closes the current second.
func (b *rrBuckets) flush() {
	end := min(time.Duration(b.cur+1)*time.Second, b.duration)
	length := (end - time.Duration(b.cur)*time.Second).Seconds()
	n := b.h.Count()
	b.s.T = append(b.s.T, end.Seconds())
	b.s.Transactions = append(b.s.Transactions, n)
	b.s.PerSecond = append(b.s.PerSecond, float64(n)/length)
	b.s.P50Us = append(b.s.P50Us, us(b.h.Quantile(0.5)))
	b.s.P99Us = append(b.s.P99Us, us(b.h.Quantile(0.99)))
	b.h.Reset()
	b.cur++
}

// series closes the remaining seconds and returns the series.
func (b *rrBuckets) series() *RRSeries {
	for b.cur < b.seconds() {
		b.flush()
	}
	return &b.s
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func summarize(c RRConfig, h, connect *Histogram, elapsed time.Duration, timeouts uint64) *RRResult {
	r := &RRResult{Mode: c.Mode, RequestSize: c.RequestSize, ResponseSize: c.ResponseSize,
		Seconds: elapsed.Seconds(), Transactions: h.Count(), Timeouts: timeouts}
	if elapsed > 0 {
		r.PerSecond = float64(h.Count()) / elapsed.Seconds()
	}
	r.LatencyUs = latency(h)
	if connect != nil && connect.Count() > 0 {
		l := latency(connect)
		r.ConnectUs = &l
	}
	return r
}

func latency(h *Histogram) Latency {
	return Latency{Mean: us(h.Mean()), Min: us(h.Min()), P50: us(h.Quantile(0.5)), P90: us(h.Quantile(0.9)),
		P99: us(h.Quantile(0.99)), P999: us(h.Quantile(0.999)), Max: us(h.Max())}
}

// ParseRR reads a client's JSON result.
func ParseRR(data []byte) (*RRResult, error) {
	var r RRResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("rr result: %w", err)
	}
	if !slices.Contains(RRModes, r.Mode) || r.Seconds <= 0 {
		return nil, fmt.Errorf("rr result: not a result (mode %q, %g s)", r.Mode, r.Seconds)
	}
	return &r, nil
}

// WriteRR prints a result as the client's JSON.
func WriteRR(w io.Writer, r *RRResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
