package traffic

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRRMismatch: a client whose mode or sizes differ from its server's
// fails with an error naming the likely cause, fast where the symptom
// shows at once, and after the stall otherwise.
func TestRRMismatch(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	const hint = "the server's mode or sizes likely differ from this client's"
	cases := []struct {
		name           string
		server, client RRConfig // Mode, RequestSize, ResponseSize
		want           string
		within         time.Duration
	}{
		{"crr client, rr server with other sizes (stalls)", RRConfig{Mode: TCPRR, RequestSize: 100, ResponseSize: 200}, RRConfig{Mode: TCPCRR, RequestSize: 1, ResponseSize: 1},
			"stalled: nothing moved for 500ms (10 timeouts of 50ms): no response to the first request (a server answers only a whole request): " + hint + " (tcp-crr, request 1 B, response 1 B)", time.Second},
		{"crr client, rr server", RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 1}, RRConfig{Mode: TCPCRR, RequestSize: 1, ResponseSize: 1},
			"waiting for the server to close: the server kept the connection open after its response, as a tcp-rr server does: " + hint, 300 * time.Millisecond},
		{"rr client, crr server", RRConfig{Mode: TCPCRR, RequestSize: 1, ResponseSize: 1}, RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 1},
			"the server closed the connection after a response, as a tcp-crr server does: " + hint, 300 * time.Millisecond},
		{"larger response", RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 200}, RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 1},
			"response: more bytes came than the response size: " + hint, 300 * time.Millisecond},
		{"smaller request (two responses per request)", RRConfig{Mode: TCPRR, RequestSize: 50, ResponseSize: 10}, RRConfig{Mode: TCPRR, RequestSize: 100, ResponseSize: 10, Warmup: 200 * time.Millisecond},
			"response: more bytes came than the response size: " + hint, 300 * time.Millisecond}, // seen in the warm-up
		{"smaller response (stalls)", RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 1}, RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 200},
			"only 1 of the 200 response bytes came: " + hint, time.Second},
		{"crr, larger response", RRConfig{Mode: TCPCRR, RequestSize: 1, ResponseSize: 200}, RRConfig{Mode: TCPCRR, RequestSize: 1, ResponseSize: 100},
			"waiting for the server to close: more bytes came than the response size: " + hint, 300 * time.Millisecond},
		{"udp, other response size", RRConfig{Mode: UDPRR, RequestSize: 100, ResponseSize: 200}, RRConfig{Mode: UDPRR, RequestSize: 100, ResponseSize: 100},
			"response: a response of 200 bytes, not 100: " + hint, 300 * time.Millisecond},
		{"crr client, rr server with other sizes, a run shorter than the stall", RRConfig{Mode: TCPRR, RequestSize: 100, ResponseSize: 200}, RRConfig{Mode: TCPCRR, RequestSize: 1, ResponseSize: 1, Duration: 200 * time.Millisecond},
			"no transaction completed in 200ms: no response to the first request (a server answers only a whole request): " + hint, time.Second},
		{"smaller response, a run shorter than the stall", RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 1}, RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 200, Duration: 200 * time.Millisecond},
			"no transaction completed in 200ms: only 1 of the 200 response bytes came: " + hint, time.Second},
		{"tcp client, udp server", RRConfig{Mode: UDPRR, RequestSize: 1, ResponseSize: 1}, RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 1},
			"connection refused: no TCP (tcp-rr, tcp-crr) server listens on", startGrace + 500*time.Millisecond},
		{"udp client, tcp server", RRConfig{Mode: TCPRR, RequestSize: 1, ResponseSize: 1}, RRConfig{Mode: UDPRR, RequestSize: 1, ResponseSize: 1},
			"connection refused: no UDP (udp-rr) server listens on", startGrace + 500*time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			network := "tcp"
			if tc.server.Mode == UDPRR {
				network = "udp"
			}
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t, network))
			srv := tc.server
			srv.Addr, srv.Duration = addr, time.Second
			serve(t, srv)
			c := tc.client
			c.Addr, c.Timeout = addr, timeout
			if c.Duration == 0 {
				c.Duration = 10 * time.Second
			}
			start := time.Now()
			r, err := RRRun(context.Background(), c)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %+v; want an error containing %q", err, r, tc.want)
			}
			if took > tc.within {
				t.Errorf("failed after %v, want within %v", took, tc.within)
			}
		})
	}
}

// TestRRServerStartsLate: a client started a moment before its server
// (as `cnlab exec ... rr server &` then the client) waits for it.
func TestRRServerStartsLate(t *testing.T) {
	t.Parallel()
	for _, mode := range RRModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			network := "tcp"
			if mode == UDPRR {
				network = "udp"
			}
			c := RRConfig{Mode: mode, Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t, network)), RequestSize: 100, ResponseSize: 200,
				Warmup: 300 * time.Millisecond, Duration: 200 * time.Millisecond, Timeout: 50 * time.Millisecond}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				time.Sleep(200 * time.Millisecond)
				done <- RRServe(ctx, c, nil)
			}()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("server: %v", err)
				}
			})
			if r, err := RRRun(context.Background(), c); err != nil || r.Transactions == 0 {
				t.Errorf("%v %+v", err, r)
			}
		})
	}
}
