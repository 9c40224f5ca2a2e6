package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HTTP load modes: how a client's workers use connections.
const (
	HTTPKeepAlive = "keepalive" // each worker reuses one connection
	HTTPNew       = "new"       // a new TCP connection per request (Connection: close)
)

// HTTPModes lists the HTTP load modes.
var HTTPModes = []string{HTTPKeepAlive, HTTPNew}

// HTTPServerConfig is an HTTP server of ServeHTTP.
type HTTPServerConfig struct {
	Addr string // host:port to listen on; ":80" listens on every address
	Name string // first word of every response body, to tell servers apart
	// Status (0: 200) answers every request; a test's way to make a
	// server that denies (403) without a policy.
	Status int
}

// Check validates a server config.
func (c HTTPServerConfig) Check() error {
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" {
		return fmt.Errorf("listen %q: want host:port or :port", c.Addr)
	}
	if strings.ContainsAny(c.Name, "\r\n") {
		return fmt.Errorf("name %q: one line", c.Name)
	}
	if c.Status != 0 && (c.Status < 200 || c.Status > 599) {
		return fmt.Errorf("status %d: 200 to 599", c.Status)
	}
	return nil
}

// httpHandler answers every request with c.Status and the body
// "<name> <METHOD> <request-target>\n".
func httpHandler(c HTTPServerConfig) http.Handler {
	status := c.Status
	if status == 0 {
		status = http.StatusOK
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := fmt.Sprintf("%s %s %s\n", c.Name, r.Method, r.RequestURI)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// ServeHTTP serves HTTP/1.1 with keep-alive on c.Addr until ctx ends, and
// then returns nil after closing its connections. Every request, whatever
// its method and path, gets c.Status (200) and the body
// "<name> <METHOD> <request-target>\n", the target with its query as the
// client sent it. The server keeps a connection open whatever the status:
// a 403 does not cost the client a new connection. ready, if not nil,
// receives the listening address (the port chosen for ":0") once the
// socket listens.
func ServeHTTP(ctx context.Context, c HTTPServerConfig, ready chan<- net.Addr) error {
	if err := c.Check(); err != nil {
		return err
	}
	l, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.Addr, err)
	}
	srv := &http.Server{
		Handler:           httpHandler(c),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	if ready != nil {
		ready <- l.Addr()
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve %s: %w", c.Addr, err)
	case <-ctx.Done():
	}
	// Idle keep-alive connections close at once; a request in flight
	// gets a second to finish.
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		_ = srv.Close()
	}
	<-done
	return nil
}

// HTTPConfig is one HTTP load run of RunHTTP.
type HTTPConfig struct {
	URL     string   // http://host[:port]/path[?query]
	Method  string   // "" is GET
	Headers []string // "Key: value"; a Host header sets the Host as Host does
	Host    string   // Host header ("" : the URL's host)
	Mode    string   // HTTPKeepAlive ("") or HTTPNew
	// Concurrency (0: 1) is the number of workers, each sending its next
	// request when the previous one's response has been read.
	Concurrency int
	// Duration is the length of the run; with Requests it may be 0 (no
	// limit in time) and otherwise ends the run early.
	Duration time.Duration
	Requests int           // requests in all, 0: as many as fit in Duration
	Timeout  time.Duration // per request, connect included (0: 5 s)
	Expect   []int         // expected statuses (nil: 200)
}

// HTTPConfig's defaults.
const (
	defaultHTTPTimeout     = 5 * time.Second
	defaultHTTPConcurrency = 1
)

// withDefaults returns c with its zero fields given their defaults.
func (c HTTPConfig) withDefaults() HTTPConfig {
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	if c.Mode == "" {
		c.Mode = HTTPKeepAlive
	}
	if c.Concurrency == 0 {
		c.Concurrency = defaultHTTPConcurrency
	}
	if c.Timeout == 0 {
		c.Timeout = defaultHTTPTimeout
	}
	if len(c.Expect) == 0 {
		c.Expect = []int{http.StatusOK}
	}
	return c
}

// Check validates a config; its errors name the field that is wrong.
func (c HTTPConfig) Check() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return errors.New("url: give the server's URL, e.g. http://10.0.0.2/")
	case err != nil:
		return fmt.Errorf("url %q: %w", c.URL, errors.Unwrap(err))
	case u.Scheme != "http" || u.Host == "":
		return fmt.Errorf("url %q: want http://host[:port]/path", c.URL)
	case c.Method != "" && !isToken(c.Method):
		return fmt.Errorf("method %q: not an HTTP method", c.Method)
	case c.Mode != "" && !slices.Contains(HTTPModes, c.Mode):
		return fmt.Errorf("mode %q: one of %s", c.Mode, strings.Join(HTTPModes, ", "))
	case c.Concurrency < 0 || c.Concurrency > 10000:
		return fmt.Errorf("concurrency %d: 1 to 10000", c.Concurrency)
	case c.Duration < 0:
		return fmt.Errorf("duration %s: cannot be negative", c.Duration)
	case c.Requests < 0:
		return fmt.Errorf("requests %d: cannot be negative", c.Requests)
	case c.Duration == 0 && c.Requests == 0:
		return errors.New("duration: must be positive unless a number of requests is given")
	case c.Timeout < 0:
		return fmt.Errorf("timeout %s: cannot be negative", c.Timeout)
	case strings.ContainsAny(c.Host, " \t\r\n"):
		return fmt.Errorf("host %q: a host name, without spaces", c.Host)
	}
	for _, h := range c.Headers {
		if _, _, err := parseHeader(h); err != nil {
			return err
		}
	}
	for _, s := range c.Expect {
		if s < 100 || s > 599 {
			return fmt.Errorf("expect %d: a status from 100 to 599", s)
		}
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110), as a method is.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// parseHeader splits "Key: value".
func parseHeader(h string) (key, value string, err error) {
	k, v, ok := strings.Cut(h, ":")
	k = strings.TrimSpace(k)
	if !ok || !isToken(k) || strings.ContainsAny(v, "\r\n") {
		return "", "", fmt.Errorf("header %q: want \"Key: value\"", h)
	}
	return k, strings.TrimSpace(v), nil
}

// HTTPResult is what an HTTP load client measured (RunHTTP), or what ab
// reported (ParseAB, Mode "ab").
type HTTPResult struct {
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`  // from the start to the last request's end, or the run's end
	Requests    uint64  `json:"requests"` // completed: with a response, or an error
	PerSecond   float64 `json:"requestsPerSecond"`
	// LatencyUs is a request's time from its start (before the connect
	// in mode new) to the last byte of its response body, over the
	// requests that got a response.
	LatencyUs Latency `json:"latencyUs"`
	// ConnectUs (mode new, and keepalive's first connections) is the
	// TCP connect alone: connect() to established.
	ConnectUs *Latency `json:"connectUs,omitempty"`
	// Connections is the number of TCP connections opened: Concurrency
	// with keepalive (more after errors), Requests with new.
	Connections uint64 `json:"connections"`
	// Statuses counts the requests by response status; 0 counts the
	// errors (refused, reset, timed out). ab reports no statuses: nil.
	Statuses   map[int]uint64 `json:"statuses"`
	Errors     uint64         `json:"errors"`               // requests without a response
	Unexpected uint64         `json:"unexpected"`           // requests whose status is not expected, errors included
	FirstError string         `json:"firstError,omitempty"` // the text of one error, to tell why
	// ResolutionUs is the step of LatencyUs's percentiles when the
	// client reports them rounded (ab: whole milliseconds, 1000); 0 when
	// exact. A percentile below it was not measured: it reads 0.
	ResolutionUs float64 `json:"resolutionUs,omitempty"`
	// Series is the run second by second (cnlab http only).
	Series *HTTPSeries `json:"series,omitempty"`
}

// HTTPSeries is an HTTP run cut into seconds: each request counts in the
// second in which it completed (with a response or an error). The last
// second is shorter when the run is not whole seconds.
type HTTPSeries struct {
	T         []float64 `json:"t"`        // end of each second, from the run's start
	Requests  []uint64  `json:"requests"` // completed in that second
	PerSecond []float64 `json:"requestsPerSecond"`
}

// httpSeries adds up the workers' per-second counts over elapsed.
func httpSeries(workers []*httpWorker, elapsed time.Duration) *HTTPSeries {
	n := max(int((elapsed+time.Second-1)/time.Second), 1)
	s := &HTTPSeries{Requests: make([]uint64, n)}
	for _, w := range workers {
		for i, c := range w.perSec {
			s.Requests[min(i, n-1)] += c
		}
	}
	for i, c := range s.Requests {
		end := min(time.Duration(i+1)*time.Second, elapsed)
		length := (end - time.Duration(i)*time.Second).Seconds()
		s.T = append(s.T, end.Seconds())
		if length > 0 {
			s.PerSecond = append(s.PerSecond, float64(c)/length)
		} else {
			s.PerSecond = append(s.PerSecond, 0)
		}
	}
	return s
}

// httpWorker is one worker of a run: its own client and its own counts.
type httpWorker struct {
	c      HTTPConfig
	client *http.Client
	h      *Histogram // latency of requests with a response
	// mu guards connect and conns: the transport dials, and calls the
	// trace's connect hooks, on a goroutine of its own, which may outlive
	// a request that timed out.
	mu       sync.Mutex
	connect  *Histogram
	conns    uint64
	statuses map[int]uint64
	last     time.Time // end of its last counted request
	firstErr error
	// perSec counts its requests by the second of the run they completed
	// in (grown once a second, not per request).
	perSec []uint64
}

func newHTTPWorker(c HTTPConfig) *httpWorker {
	d := &net.Dialer{Timeout: c.Timeout, KeepAlive: -1}
	tr := &http.Transport{
		DialContext:           d.DialContext,
		DisableCompression:    true,
		DisableKeepAlives:     c.Mode == HTTPNew,
		MaxConnsPerHost:       1,
		MaxIdleConnsPerHost:   1,
		IdleConnTimeout:       time.Minute,
		ResponseHeaderTimeout: c.Timeout,
	}
	return &httpWorker{c: c, h: NewHistogram(), connect: NewHistogram(), statuses: map[int]uint64{},
		client: &http.Client{
			Transport: tr,
			// A redirect is a response to count, not to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}}
}

// do sends one request to target and reads its response to the end, so
// that with keep-alive the connection serves the next request whatever
// the status. It returns the status (0 with an error), whether the request
// went over a connection already used, and the time from the request's
// start to the response's last byte.
func (w *httpWorker) do(ctx context.Context, target string) (status int, reused bool, took time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, w.c.Timeout)
	defer cancel()
	var connStart time.Time
	trace := &httptrace.ClientTrace{
		ConnectStart: func(_, _ string) { connStart = time.Now() },
		ConnectDone: func(_, _ string, err error) {
			if err == nil && !connStart.IsZero() {
				d := time.Since(connStart)
				w.mu.Lock()
				w.connect.Record(d)
				w.mu.Unlock()
			}
		},
		GotConn: func(i httptrace.GotConnInfo) {
			reused = i.Reused
			if !i.Reused {
				w.mu.Lock()
				w.conns++
				w.mu.Unlock()
			}
		},
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), w.c.Method, target, nil)
	if err != nil {
		return 0, false, 0, err
	}
	for _, h := range w.c.Headers {
		k, v, _ := parseHeader(h) // checked by Check
		if http.CanonicalHeaderKey(k) == "Host" {
			req.Host = v
			continue
		}
		req.Header.Add(k, v)
	}
	if w.c.Host != "" {
		req.Host = w.c.Host
	}
	start := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, reused, 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	took = time.Since(start)
	resp.Body.Close()
	if err != nil {
		return 0, reused, 0, fmt.Errorf("read response body: %w", err)
	}
	return resp.StatusCode, reused, took, nil
}

// RunHTTP sends c.Method requests to c.URL from c.Concurrency workers
// until c.Requests were sent or c.Duration is over, and counts the
// responses by status. A request still waiting at the end of the run is
// not counted. It returns an error only when ctx ends or c is invalid:
// refused connections, timeouts and unexpected statuses are results.
func RunHTTP(ctx context.Context, c HTTPConfig) (*HTTPResult, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var end time.Time
	if c.Duration > 0 {
		end = start.Add(c.Duration)
		var cancelT context.CancelFunc
		runCtx, cancelT = context.WithDeadline(runCtx, end)
		defer cancelT()
	}
	var issued atomic.Int64
	var timeUp atomic.Bool // a worker stopped because the run's time was over
	workers := make([]*httpWorker, c.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := newHTTPWorker(c)
		workers[i] = w
		wg.Go(func() {
			defer w.client.CloseIdleConnections()
			for {
				if c.Requests > 0 && issued.Add(1) > int64(c.Requests) {
					return
				}
				if runCtx.Err() != nil {
					timeUp.Store(true)
					return
				}
				status, _, took, err := w.do(runCtx, c.URL)
				if runCtx.Err() != nil {
					timeUp.Store(true)
					return // the run ended with the request in flight
				}
				w.last = time.Now()
				k := int(w.last.Sub(start) / time.Second)
				for len(w.perSec) <= k {
					w.perSec = append(w.perSec, 0)
				}
				w.perSec[k]++
				if err == nil {
					w.h.Record(took)
				} else if w.firstErr == nil {
					w.firstErr = err
				}
				w.statuses[status]++
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &HTTPResult{Mode: c.Mode, Concurrency: c.Concurrency, Statuses: map[int]uint64{}}
	h, connect := NewHistogram(), NewHistogram()
	last := start
	for _, w := range workers {
		h.Merge(w.h)
		w.mu.Lock()
		connect.Merge(w.connect)
		r.Connections += w.conns
		w.mu.Unlock()
		for s, n := range w.statuses {
			r.Statuses[s] += n
		}
		if w.last.After(last) {
			last = w.last
		}
		if w.firstErr != nil && r.FirstError == "" {
			r.FirstError = w.firstErr.Error()
		}
	}
	// A run stopped by its duration lasted its duration (a request still
	// waiting then is not counted, but its worker was busy); a run that
	// sent all its requests lasted until the last response.
	if timeUp.Load() {
		last = end
	}
	elapsed := last.Sub(start)
	for s, n := range r.Statuses {
		r.Requests += n
		if !slices.Contains(c.Expect, s) {
			r.Unexpected += n
		}
	}
	r.Errors = r.Statuses[0]
	r.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		r.PerSecond = float64(r.Requests) / elapsed.Seconds()
	}
	r.LatencyUs = latency(h)
	if connect.Count() > 0 {
		l := latency(connect)
		r.ConnectUs = &l
	}
	r.Series = httpSeries(workers, elapsed)
	return r, nil
}

// StatusList writes the status counts in status order, "200: 97, 403: 3,
// error: 1".
func (r *HTTPResult) StatusList() string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(r.Statuses)) {
		if s != 0 { // errors last
			parts = append(parts, fmt.Sprintf("%d: %d", s, r.Statuses[s]))
		}
	}
	if n := r.Statuses[0]; n > 0 {
		parts = append(parts, fmt.Sprintf("error: %d", n))
	}
	return strings.Join(parts, ", ")
}

// ParseHTTP reads a client's JSON result (WriteHTTP's).
func ParseHTTP(data []byte) (*HTTPResult, error) {
	var r HTTPResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("http result: %w", err)
	}
	if r.Mode == "" || r.Seconds <= 0 {
		return nil, fmt.Errorf("http result: not a result (mode %q, %g s)", r.Mode, r.Seconds)
	}
	return &r, nil
}

// WriteHTTP prints a result as the client's JSON.
func WriteHTTP(w io.Writer, r *HTTPResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
