package traffic

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serveHTTP starts ServeHTTP on a free loopback port and stops it with the
// test; it returns the server's base URL.
func serveHTTP(t testing.TB, c HTTPServerConfig) string {
	t.Helper()
	c.Addr = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- ServeHTTP(ctx, c, ready) }()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return "http://" + addr.String()
}

// denyServer answers 403 for /deny and 200 otherwise, and counts the
// connections it accepted.
func denyServer(t testing.TB) (string, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/deny" {
			w.WriteHeader(http.StatusForbidden)
		}
		io.WriteString(w, "ok\n")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, &conns
}

func TestServeHTTPBody(t *testing.T) {
	for _, status := range []int{0, 403} {
		base := serveHTTP(t, HTTPServerConfig{Name: "web", Status: status})
		resp, err := http.Post(base+"/a/b?x=1&y=2", "text/plain", strings.NewReader("data"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := max(status, 200)
		if resp.StatusCode != want || string(body) != "web POST /a/b?x=1&y=2\n" {
			t.Errorf("status %d: got %d %q", status, resp.StatusCode, body)
		}
	}
}

// TestHTTPModes runs both modes against ServeHTTP: every request is
// counted once, by status, and keepalive opens one connection per worker
// while new opens one per request.
func TestHTTPModes(t *testing.T) {
	base := serveHTTP(t, HTTPServerConfig{Name: "web"})
	for _, mode := range HTTPModes {
		t.Run(mode, func(t *testing.T) {
			c := HTTPConfig{URL: base + "/", Mode: mode, Concurrency: 3, Requests: 300,
				Headers: []string{"X-Test: 1"}, Host: "example.test"}
			r, err := RunHTTP(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if r.Requests != 300 || !reflect.DeepEqual(r.Statuses, map[int]uint64{200: 300}) || r.Errors != 0 || r.Unexpected != 0 {
				t.Errorf("requests %d, statuses %v, errors %d, unexpected %d", r.Requests, r.Statuses, r.Errors, r.Unexpected)
			}
			wantConns := uint64(3)
			if mode == HTTPNew {
				wantConns = 300
			}
			if r.Connections != wantConns {
				t.Errorf("%d connections, want %d", r.Connections, wantConns)
			}
			l := r.LatencyUs
			if r.Seconds <= 0 || r.PerSecond <= 0 || l.P50 <= 0 || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.Max || l.Min > l.P50 {
				t.Errorf("timing: %.3f s, %.0f/s, latency %+v", r.Seconds, r.PerSecond, l)
			}
			if r.ConnectUs == nil || r.Mode != mode || r.Concurrency != 3 {
				t.Errorf("result: %+v", r)
			}
		})
	}
}

// TestHTTPDuration: without a number of requests, the run lasts its
// duration.
func TestHTTPDuration(t *testing.T) {
	base := serveHTTP(t, HTTPServerConfig{Name: "web"})
	r, err := RunHTTP(context.Background(), HTTPConfig{URL: base, Duration: 200 * time.Millisecond, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Seconds != 0.2 || r.Requests < 10 || r.Statuses[200] != r.Requests || r.Connections != 2 {
		t.Errorf("%.3f s, %d requests, statuses %v, %d connections", r.Seconds, r.Requests, r.Statuses, r.Connections)
	}
}

// TestHTTPKeepAliveAcrossDenial: a 403 keeps the connection; the worker's
// next request goes over it.
func TestHTTPKeepAliveAcrossDenial(t *testing.T) {
	base, conns := denyServer(t)
	w := newHTTPWorker(HTTPConfig{Mode: HTTPKeepAlive}.withDefaults())
	defer w.client.CloseIdleConnections()
	var got []int
	for i, path := range []string{"/allow", "/deny", "/allow"} {
		status, reused, _, err := w.do(context.Background(), base+path)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, status)
		if reused != (i > 0) {
			t.Errorf("request %d (%s): reused %v", i, path, reused)
		}
	}
	if !reflect.DeepEqual(got, []int{200, 403, 200}) || conns.Load() != 1 || w.conns != 1 {
		t.Errorf("statuses %v over %d server-side connections (%d client-side), want 200 403 200 over 1", got, conns.Load(), w.conns)
	}

	// The same over a whole run: denials all over one connection, and
	// unexpected.
	r, err := RunHTTP(context.Background(), HTTPConfig{URL: base + "/deny", Requests: 50})
	if err != nil {
		t.Fatal(err)
	}
	if r.Statuses[403] != 50 || r.Unexpected != 50 || r.Errors != 0 || r.Connections != 1 || conns.Load() != 2 {
		t.Errorf("statuses %v, unexpected %d, errors %d, %d connections (server: %d in all, want 2)", r.Statuses, r.Unexpected, r.Errors, r.Connections, conns.Load())
	}
}

// TestHTTPNewModeCloses: mode new asks for Connection: close and never
// reuses a connection, whatever the status.
func TestHTTPNewModeCloses(t *testing.T) {
	base, conns := denyServer(t)
	r, err := RunHTTP(context.Background(), HTTPConfig{URL: base + "/deny", Mode: HTTPNew, Requests: 20, Expect: []int{403}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Statuses[403] != 20 || r.Unexpected != 0 || r.Connections != 20 || conns.Load() != 20 {
		t.Errorf("statuses %v, unexpected %d, %d connections (server: %d)", r.Statuses, r.Unexpected, r.Connections, conns.Load())
	}
}

// TestHTTPUnexpected: statuses outside Expect and errors are unexpected;
// errors count as status 0.
func TestHTTPUnexpected(t *testing.T) {
	mixed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("s") {
		case "404":
			http.NotFound(w, r)
		case "hang":
			<-r.Context().Done()
		}
	}))
	defer mixed.Close()
	expect := []int{200, 404}
	r, err := RunHTTP(context.Background(), HTTPConfig{URL: mixed.URL + "/?s=404", Requests: 5, Expect: expect})
	if err != nil || r.Statuses[404] != 5 || r.Unexpected != 0 {
		t.Errorf("404 expected: %+v %v", r, err)
	}
	r, err = RunHTTP(context.Background(), HTTPConfig{URL: mixed.URL + "/?s=hang", Requests: 2, Timeout: 50 * time.Millisecond, Expect: expect})
	if err != nil || r.Errors != 2 || r.Statuses[0] != 2 || r.Unexpected != 2 || r.Requests != 2 || r.LatencyUs.Max != 0 || r.FirstError == "" {
		t.Errorf("timeouts: %+v %v", r, err)
	}
	// Refused: nothing listens on a port just closed.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	r, err = RunHTTP(context.Background(), HTTPConfig{URL: "http://" + addr + "/", Requests: 3})
	if err != nil || r.Errors != 3 || r.Unexpected != 3 || !strings.Contains(r.FirstError, "refused") {
		t.Errorf("refused: %+v %v", r, err)
	}
	if got := (&HTTPResult{Statuses: map[int]uint64{0: 1, 403: 2, 200: 7}}).StatusList(); got != "200: 7, 403: 2, error: 1" {
		t.Errorf("StatusList: %q", got)
	}
}

func TestHTTPCanceled(t *testing.T) {
	base := serveHTTP(t, HTTPServerConfig{Name: "web"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := RunHTTP(ctx, HTTPConfig{URL: base, Duration: time.Hour}); err != context.DeadlineExceeded {
		t.Errorf("canceled run: %v", err)
	}
}

func TestHTTPCheck(t *testing.T) {
	ok := HTTPConfig{URL: "http://10.0.0.2/", Duration: time.Second}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(*HTTPConfig)
		want string
	}{
		{func(c *HTTPConfig) { c.URL = "" }, "url: give the server's URL"},
		{func(c *HTTPConfig) { c.URL = "https://10.0.0.2/" }, `url "https://10.0.0.2/": want http://host[:port]/path`},
		{func(c *HTTPConfig) { c.URL = "10.0.0.2" }, `url "10.0.0.2": want http://`},
		{func(c *HTTPConfig) { c.URL = "http://a b/" }, `url "http://a b/": invalid character`},
		{func(c *HTTPConfig) { c.Method = "GE T" }, `method "GE T": not an HTTP method`},
		{func(c *HTTPConfig) { c.Mode = "pipelined" }, `mode "pipelined": one of keepalive, new`},
		{func(c *HTTPConfig) { c.Concurrency = -1 }, "concurrency -1: 1 to 10000"},
		{func(c *HTTPConfig) { c.Duration = -time.Second }, "duration -1s: cannot be negative"},
		{func(c *HTTPConfig) { c.Duration = 0 }, "duration: must be positive unless a number of requests is given"},
		{func(c *HTTPConfig) { c.Requests = -1 }, "requests -1: cannot be negative"},
		{func(c *HTTPConfig) { c.Timeout = -1 }, "timeout -1ns: cannot be negative"},
		{func(c *HTTPConfig) { c.Headers = []string{"X-Ok: 1", "NoColon"} }, `header "NoColon": want "Key: value"`},
		{func(c *HTTPConfig) { c.Headers = []string{"Bad Key: 1"} }, `header "Bad Key: 1"`},
		{func(c *HTTPConfig) { c.Host = "a b" }, `host "a b": a host name`},
		{func(c *HTTPConfig) { c.Expect = []int{200, 42} }, "expect 42: a status from 100 to 599"},
	} {
		c := ok
		tc.edit(&c)
		err := c.Check()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Check: %v, want %q", err, tc.want)
		}
		if _, rerr := RunHTTP(context.Background(), c); rerr == nil || rerr.Error() != err.Error() {
			t.Errorf("RunHTTP: %v, want the Check error", rerr)
		}
	}
	if err := (HTTPConfig{URL: "http://x/", Requests: 1}).Check(); err != nil {
		t.Errorf("requests without duration: %v", err)
	}
	for c, want := range map[HTTPServerConfig]string{
		{Addr: "80"}:                     `listen "80": want host:port or :port`,
		{Addr: ":80", Name: "a\nb"}:      `name "a\nb": one line`,
		{Addr: ":80", Status: 100}:       "status 100: 200 to 599",
		{Addr: "127.0.0.1:0", Status: 0}: "",
	} {
		err := c.Check()
		if (err == nil) != (want == "") || (err != nil && err.Error() != want) {
			t.Errorf("%+v: Check: %v, want %q", c, err, want)
		}
	}
}

func TestHTTPResultJSON(t *testing.T) {
	base := serveHTTP(t, HTTPServerConfig{Name: "web"})
	r, err := RunHTTP(context.Background(), HTTPConfig{URL: base, Requests: 20, Expect: []int{403}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteHTTP(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"200": 20`) || !strings.Contains(buf.String(), `"requestsPerSecond"`) {
		t.Errorf("json: %s", buf.String())
	}
	back, err := ParseHTTP(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip:\n%+v\n%+v", back, r)
	}
	for _, bad := range []string{`{`, `{"mode": "keepalive"}`, `{"seconds": 1}`} {
		if _, err := ParseHTTP([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "http result: ") {
			t.Errorf("ParseHTTP(%s): %v", bad, err)
		}
	}
}

// TestParseAB parses the output of ApacheBench 2.3 (Debian 12's
// apache2-utils), recorded on loopback:
//
//   - ab-keepalive-200.txt: ab -k -n 5000 -c 4 'http://127.0.0.1:18080/index?x=1'
//     against cnlab http server --listen 127.0.0.1:18080 --name web;
//   - ab-keepalive-403.txt: ab -k -n 3000 -c 2 http://127.0.0.1:18403/deny
//     against cnlab http server --listen 127.0.0.1:18403 --name deny --status 403;
//   - ab-new-200.txt: ab -n 2000 -c 4 http://127.0.0.1:18080/ (no keep-alive);
//   - ab-length-404.txt: ab -n 300 -c 2 against a Python server answering
//     404 to every 5th request and a body one byte longer to every 3rd;
//   - ab-reset.txt: ab -r -n 300 -c 2 against a Python server resetting
//     every 7th connection (SO_LINGER 0) before answering.
func TestParseAB(t *testing.T) {
	for _, tc := range []struct {
		file string
		want HTTPResult
	}{
		{"ab-keepalive-200.txt", HTTPResult{Mode: "ab", ResolutionUs: ABResolutionUs, Concurrency: 4, Seconds: 0.104, Requests: 5000, PerSecond: 48060.29,
			LatencyUs: Latency{Mean: 83, Max: 4000}}},
		{"ab-keepalive-403.txt", HTTPResult{Mode: "ab", ResolutionUs: ABResolutionUs, Concurrency: 2, Seconds: 0.134, Requests: 3000, PerSecond: 22339.55,
			LatencyUs: Latency{Mean: 90, Max: 2000}, Unexpected: 3000}},
		{"ab-new-200.txt", HTTPResult{Mode: "ab", ResolutionUs: ABResolutionUs, Concurrency: 4, Seconds: 0.174, Requests: 2000, PerSecond: 11491.15,
			LatencyUs: Latency{Mean: 348, P90: 1000, P99: 1000, Max: 3000}}},
		{"ab-length-404.txt", HTTPResult{Mode: "ab", ResolutionUs: ABResolutionUs, Concurrency: 2, Seconds: 0.136, Requests: 300, PerSecond: 2198.69,
			LatencyUs: Latency{Mean: 910, P50: 1000, P90: 1000, P99: 2000, Max: 3000}, Unexpected: 60}},
		{"ab-reset.txt", HTTPResult{Mode: "ab", ResolutionUs: ABResolutionUs, Concurrency: 2, Seconds: 0.068, Requests: 300, PerSecond: 4387.31,
			LatencyUs: Latency{Mean: 456, P90: 1000, P99: 1000, Max: 1000}, Errors: 43, Unexpected: 43}},
	} {
		data, err := os.ReadFile("testdata/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseAB(data)
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		// Milliseconds with three decimals: compare to the microsecond.
		r.LatencyUs.Mean = float64(int(r.LatencyUs.Mean + 0.5))
		if !reflect.DeepEqual(*r, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.file, *r, tc.want)
		}
	}
	full, _ := os.ReadFile("testdata/ab-new-200.txt")
	for name, data := range map[string]string{
		"empty":    "",
		"stopped":  "Benchmarking 10.0.0.2 (be patient)\napr_socket_recv: Connection reset by peer (104)\n",
		"no table": string(full[:bytes.Index(full, []byte("Percentage of"))]),
	} {
		if _, err := ParseAB([]byte(data)); err == nil || !strings.HasPrefix(err.Error(), "ab output: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestHTTPRequestShape: the method, headers and Host of the config reach
// the server, and a redirect is counted, not followed.
func TestHTTPRequestShape(t *testing.T) {
	got := make(chan *http.Request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	r, err := RunHTTP(context.Background(), HTTPConfig{URL: srv.URL + "/p?q=1", Method: "PUT", Requests: 1, Expect: []int{302},
		Headers: []string{"X-Role: guest", "X-Role:  admin ", "Host: from-header"}, Host: "from-flag"})
	if err != nil || r.Statuses[302] != 1 || r.Unexpected != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	req := <-got
	if req.Method != "PUT" || req.RequestURI != "/p?q=1" || req.Host != "from-flag" ||
		!reflect.DeepEqual(req.Header.Values("X-Role"), []string{"guest", "admin"}) || req.Header.Get("Accept-Encoding") != "" {
		t.Errorf("request: %s %s Host %q, headers %v", req.Method, req.RequestURI, req.Host, req.Header)
	}
	if len(got) != 0 {
		t.Error("the redirect was followed")
	}
	if _, err := RunHTTP(context.Background(), HTTPConfig{URL: srv.URL, Requests: 1, Expect: []int{302}, Headers: []string{"host: h"}}); err != nil {
		t.Fatal(err)
	}
	if req := <-got; req.Host != "h" {
		t.Errorf("Host header: %q", req.Host)
	}
}
