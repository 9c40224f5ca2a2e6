package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
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
// the sizes (the experiment runner starts both with the same config).
type RRConfig struct {
	Mode         string
	Addr         string        // server address, host:port
	RequestSize  int           // bytes per request (netperf's default: 1)
	ResponseSize int           // bytes per response (netperf's default: 1)
	Duration     time.Duration // measured time
	Warmup       time.Duration // transactions before it are not counted
	Timeout      time.Duration // per transaction (udp-rr: a lost datagram)
}

// Check validates a config.
func (c RRConfig) Check() error {
	switch {
	case !contains(RRModes, c.Mode):
		return fmt.Errorf("mode %q: one of %s", c.Mode, strings.Join(RRModes, ", "))
	case c.RequestSize < 1 || c.RequestSize > 65000:
		return fmt.Errorf("request size %d: 1 to 65000 bytes", c.RequestSize)
	case c.ResponseSize < 1 || c.ResponseSize > 65000:
		return fmt.Errorf("response size %d: 1 to 65000 bytes", c.ResponseSize)
	case c.Duration <= 0:
		return errors.New("duration must be positive")
	case c.Warmup < 0:
		return errors.New("warm-up cannot be negative")
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
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

// RRResult is what a request/response client measured.
type RRResult struct {
	Mode         string  `json:"mode"`
	RequestSize  int     `json:"requestSize"`
	ResponseSize int     `json:"responseSize"`
	Seconds      float64 `json:"seconds"`      // measured time
	Transactions uint64  `json:"transactions"` // completed in it
	PerSecond    float64 `json:"transactionsPerSecond"`
	LatencyUs    Latency `json:"latencyUs"`
	Timeouts     uint64  `json:"timeouts,omitempty"` // udp-rr: lost request or response
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func summarize(c RRConfig, h *Histogram, elapsed time.Duration, timeouts uint64) *RRResult {
	r := &RRResult{Mode: c.Mode, RequestSize: c.RequestSize, ResponseSize: c.ResponseSize,
		Seconds: elapsed.Seconds(), Transactions: h.Count(), Timeouts: timeouts}
	if elapsed > 0 {
		r.PerSecond = float64(h.Count()) / elapsed.Seconds()
	}
	r.LatencyUs = Latency{Mean: us(h.Mean()), Min: us(h.Min()), P50: us(h.Quantile(0.5)), P90: us(h.Quantile(0.9)),
		P99: us(h.Quantile(0.99)), P999: us(h.Quantile(0.999)), Max: us(h.Max())}
	return r
}

// ParseRR reads a client's JSON result.
func ParseRR(data []byte) (*RRResult, error) {
	var r RRResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("rr result: %w", err)
	}
	if !contains(RRModes, r.Mode) || r.Seconds <= 0 {
		return nil, fmt.Errorf("rr result: not a result (mode %q, %g s)", r.Mode, r.Seconds)
	}
	return &r, nil
}

// RRServe answers requests on addr until ctx ends: TCP connections get a
// response of ResponseSize bytes for every RequestSize bytes read; UDP
// datagrams get one response datagram each. ready, if not nil, is closed
// once the socket listens.
func RRServe(ctx context.Context, c RRConfig, ready chan<- struct{}) error {
	resp := make([]byte, c.ResponseSize)
	if c.Mode == UDPRR {
		pc, err := net.ListenPacket("udp", c.Addr)
		if err != nil {
			return err
		}
		if ready != nil {
			close(ready)
		}
		go func() { <-ctx.Done(); pc.Close() }()
		buf := make([]byte, 65536)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if _, err := pc.WriteTo(resp, from); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	if ready != nil {
		close(ready)
	}
	go func() { <-ctx.Done(); ln.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	go func() {
		<-ctx.Done()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		mu.Lock()
		conns[conn] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { mu.Lock(); delete(conns, conn); mu.Unlock(); conn.Close() }()
			req := make([]byte, c.RequestSize)
			for {
				if _, err := io.ReadFull(conn, req); err != nil {
					return
				}
				if _, err := conn.Write(resp); err != nil {
					return
				}
			}
		}()
	}
}

// RRRun runs the client side and measures transactions and latency.
func RRRun(ctx context.Context, c RRConfig) (*RRResult, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Timeout == 0 {
		c.Timeout = time.Second
	}
	req := make([]byte, c.RequestSize)
	resp := make([]byte, max(c.ResponseSize, 65536))
	h := NewHistogram()
	var timeouts uint64
	start := time.Now()
	measureFrom := start.Add(c.Warmup)
	end := measureFrom.Add(c.Duration)
	record := func(t0 time.Time) {
		if t0.After(measureFrom) || t0.Equal(measureFrom) {
			h.Record(time.Since(t0))
		}
	}
	switch c.Mode {
	case TCPRR:
		conn, err := net.DialTimeout("tcp", c.Addr, c.Timeout)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		_ = conn.(*net.TCPConn).SetNoDelay(true)
		for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			_ = conn.SetDeadline(t0.Add(c.Timeout))
			if _, err := conn.Write(req); err != nil {
				return nil, fmt.Errorf("request: %w", err)
			}
			if _, err := io.ReadFull(conn, resp[:c.ResponseSize]); err != nil {
				return nil, fmt.Errorf("response: %w", err)
			}
			record(t0)
		}
	case TCPCRR:
		for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := crrOnce(c, req, resp[:c.ResponseSize], t0); err != nil {
				return nil, err
			}
			record(t0)
		}
	case UDPRR:
		conn, err := net.Dial("udp", c.Addr)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			_ = conn.SetDeadline(t0.Add(c.Timeout))
			if _, err := conn.Write(req); err != nil {
				return nil, fmt.Errorf("request: %w", err)
			}
			if _, err := conn.Read(resp); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					timeouts++
					continue
				}
				return nil, fmt.Errorf("response: %w", err)
			}
			record(t0)
		}
	}
	elapsed := time.Since(measureFrom)
	if h.Count() == 0 {
		return nil, fmt.Errorf("%s to %s: no transaction completed in %v", c.Mode, c.Addr, c.Duration)
	}
	return summarize(c, h, elapsed, timeouts), nil
}

// crrOnce is one tcp-crr transaction: connect, request, response, close.
func crrOnce(c RRConfig, req, resp []byte, t0 time.Time) error {
	conn, err := net.DialTimeout("tcp", c.Addr, c.Timeout)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetNoDelay(true)
	_ = conn.SetDeadline(t0.Add(c.Timeout))
	if _, err := conn.Write(req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if _, err := io.ReadFull(conn, resp); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	return nil
}

// WriteRR prints a result as the client's JSON.
func WriteRR(w io.Writer, r *RRResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

