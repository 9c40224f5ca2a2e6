package probe

import (
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

// TestDefaultConnections checks K: n·(1−1/n)^K, the chance that uniform
// picks miss one of n backends (union bound), stays below 10⁻⁶.
func TestDefaultConnections(t *testing.T) {
	for n := 2; n <= 64; n++ {
		k := DefaultConnections(n)
		if miss := float64(n) * math.Pow(1-1/float64(n), float64(k)); miss > missProbability {
			t.Errorf("n=%d K=%d: miss probability %.2g", n, k, miss)
		}
	}
	if DefaultConnections(1) != 20 || DefaultConnections(4) != 61 {
		t.Errorf("K(1)=%d K(4)=%d, want 20 and 61", DefaultConnections(1), DefaultConnections(4))
	}
}

// TestErrorAggregation: the failures of a client add up to one cause per
// kind, whatever addresses and ports each connection had, each named
// once with its count.
func TestErrorAggregation(t *testing.T) {
	errs := map[string]int{}
	for i := range 30 {
		op := &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(10, 0, 192, 12), Port: 40000 + i},
			Addr: &net.TCPAddr{IP: net.IPv4(10, 96, 0, 80), Port: 80}, Err: timeoutErr{}}
		errs[errorCause(&connError{"connected, but no answer", op}, 2*time.Second)]++
	}
	for range 2 {
		errs[errorCause(&connError{"no connection", errRefused}, 2*time.Second)]++
	}
	errs[errorCause(&connError{"connected, but no answer", io.EOF}, 2*time.Second)]++
	errs[errorCause(nil, time.Second)]++
	got := errorSummary(errs)
	want := " (30 connections: no answer within 2s (i/o timeout); 2 connections: no connection: connection refused; 1 connection: connected, but no answer: closed without an answer (EOF); 1 connection: no answer within 1s (i/o timeout))"
	if got != want {
		t.Errorf("errorSummary:\n got %s\nwant %s", got, want)
	}
	if errorSummary(nil) != "" {
		t.Errorf("errorSummary(nil) = %q", errorSummary(nil))
	}
	if got := errorCause(&connError{"no connection", &net.OpError{Op: "dial", Err: timeoutErr{}}}, time.Second); got != "no connection within 1s (i/o timeout)" {
		t.Errorf("dial timeout: %q", got)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestCheckStatuses: an HTTP service probe's statuses against the
// model's per backend.
func TestCheckStatuses(t *testing.T) {
	for _, c := range []struct {
		name     string
		r        ServiceResult
		k        int
		affinity bool
		want     string // a mismatch that must be there ("" none)
	}{
		{"200 as the model says", ServiceResult{Expected: []string{"x/a"}, Backends: map[string]int{"x/a": 20}, Statuses: map[string]int{"200": 20}, ExpectedStatuses: map[string]int{"x/a": 200}}, 20, false, ""},
		{"403 as the model says", ServiceResult{Expected: []string{"x/a"}, Backends: map[string]int{}, Statuses: map[string]int{"403": 20}, ExpectedStatuses: map[string]int{"x/a": 403}}, 20, false, ""},
		{"200 where the model says 403", ServiceResult{Expected: []string{"x/a"}, Backends: map[string]int{"x/a": 20}, Statuses: map[string]int{"200": 20}, ExpectedStatuses: map[string]int{"x/a": 403}}, 20, false, "x/a answered 20 requests with 200, but the model says 403"},
		{"403 where the model allows", ServiceResult{Expected: []string{"x/a"}, Backends: map[string]int{}, Statuses: map[string]int{"403": 20}, ExpectedStatuses: map[string]int{"x/a": 200}}, 20, false, "20 requests got 403"},
		{"no 403 at all", ServiceResult{Expected: []string{"x/a", "x/b"}, Backends: map[string]int{"x/b": 61}, Statuses: map[string]int{"200": 61}, ExpectedStatuses: map[string]int{"x/a": 403, "x/b": 200}}, 61, false, "no request got 403 in 61 connections"},
		{"no 403 with affinity", ServiceResult{Expected: []string{"x/a", "x/b"}, Backends: map[string]int{"x/b": 61}, Statuses: map[string]int{"200": 61}, ExpectedStatuses: map[string]int{"x/a": 403, "x/b": 200}}, 61, true, ""},
		{"another status", ServiceResult{Expected: []string{"x/a"}, Backends: map[string]int{}, Statuses: map[string]int{"400": 3}, ExpectedStatuses: map[string]int{"x/a": 200}}, 20, false, "3 requests got status 400"},
	} {
		got := checkStatuses(&c.r, c.k, c.affinity)
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: mismatches %q, want none", c.name, got)
		case c.want != "" && (len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), c.want)):
			t.Errorf("%s: mismatches %q, want one with %q", c.name, got, c.want)
		}
	}
}
