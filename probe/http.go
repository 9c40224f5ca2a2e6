package probe

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// HTTPRequest is the request every cell of an HTTP probe sends.
type HTTPRequest struct {
	Method string
	Path   string // request-target, query included
	// Header lines "Name: value"; a Host line sets the Host header.
	Header []string
}

// ParseHTTPRequest reads "METHOD PATH" (the --http flag) and "Name: value"
// headers.
func ParseHTTPRequest(line string, headers []string) (HTTPRequest, error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return HTTPRequest{}, fmt.Errorf("--http %q: want \"METHOD PATH\", e.g. \"GET /public\"", line)
	}
	r := HTTPRequest{Method: f[0], Path: f[1]}
	for _, c := range r.Method {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", c) {
			return r, fmt.Errorf("--http %q: method %q is not an HTTP token", line, r.Method)
		}
	}
	if !strings.HasPrefix(r.Path, "/") {
		return r, fmt.Errorf("--http %q: the path must start with /", line)
	}
	for _, h := range headers {
		name, _, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" || strings.ContainsAny(strings.TrimSpace(name), " \t") {
			return r, fmt.Errorf("--header %q: want \"Name: value\"", h)
		}
		r.Header = append(r.Header, h)
	}
	return r, nil
}

// Model returns the request as the policy model sees it (host: the Host
// header unless a header line sets it).
func (r HTTPRequest) Model(host string) policy.Request {
	req := policy.Request{Method: r.Method, Path: r.Path, Host: host, Header: map[string][]string{}}
	for _, h := range r.Header {
		name, value, _ := strings.Cut(h, ":")
		name, value = http.CanonicalHeaderKey(strings.TrimSpace(name)), strings.TrimSpace(value)
		if name == "Host" {
			req.Host = value
			continue
		}
		req.Header[name] = append(req.Header[name], value)
	}
	return req
}

// nonceHeader carries each cell's nonce to the server, which records the
// nonces it receives: proof that a request reached it, or did not.
const nonceHeader = "X-Cnlab-Probe"

// HTTPServers are the probe's HTTP listeners, one per endpoint on a port.
// Each answers 200 with "<endpoint> <METHOD> <request-target>\n" and
// records the nonce of every request it receives.
type HTTPServers struct {
	servers
	mu   sync.Mutex
	seen map[string]string // nonce -> endpoint that received it
}

// ListenHTTP starts an HTTP server on port in every endpoint of the lab.
// Close stops them.
func ListenHTTP(lab *topology.Spec, port int) (*HTTPServers, error) {
	s := &HTTPServers{seen: map[string]string{}}
	for i := range lab.Endpoints {
		ep := &lab.Endpoints[i]
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n := r.Header.Get(nonceHeader); n != "" {
				s.mu.Lock()
				s.seen[n] = ep.ID()
				s.mu.Unlock()
			}
			fmt.Fprintf(w, "%s %s %s\n", ep.ID(), r.Method, r.RequestURI)
		}), ReadHeaderTimeout: 10 * time.Second}
		// On every address of the endpoint: each family's (a dual-stack
		// lab's L7 ports are proxied over both).
		for _, a := range ep.Addrs() {
			var ln net.Listener
			err := netns.Do(ep.Netns, func() error {
				var err error
				ln, err = net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
				return err
			})
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("listen on tcp %s in %s: %w (is something else using the port?)", netip.AddrPortFrom(a, uint16(port)), ep.ID(), err)
			}
			s.add(func() { ln.Close() })
			s.wg.Add(1)
			go func() { defer s.wg.Done(); _ = srv.Serve(ln) }()
		}
		s.add(func() { srv.Close() })
	}
	return s, nil
}

// Close stops the servers.
func (s *HTTPServers) Close() { s.close() }

// Received reports which endpoint received the request carrying nonce
// ("" if none).
func (s *HTTPServers) Received(nonce string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[nonce]
}

// HTTPResult is what one request got: the status (0 when no connection
// could be made or no answer came), the body, and the error if any.
type HTTPResult struct {
	Status int
	Body   string
	Err    error
}

// Nonce returns a fresh nonce for one request.
func Nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SendHTTP sends requests one after the other on one connection opened
// from inside ns to dst (HTTP/1.1 keep-alive), each with its nonce, and
// returns each result. A request after a failed one is not sent (status
// 0, the same error).
func SendHTTP(ctx context.Context, ns string, dst netip.AddrPort, reqs []HTTPRequest, nonces []string, timeout time.Duration) []HTTPResult {
	out := make([]HTTPResult, len(reqs))
	c, err := dialTCP(ctx, ns, dst, timeout)
	if err != nil {
		err = classify(err)
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, r := range reqs {
		if err != nil {
			out[i].Err = err
			continue
		}
		_ = c.SetDeadline(time.Now().Add(timeout))
		out[i], err = roundTrip(c, br, dst, r, nonces[i])
		if err != nil {
			out[i].Err = err
		}
	}
	return out
}

// roundTrip writes one request on c by hand (the method and path exactly
// as given: net/http would refuse or rewrite some of the near misses the
// tests send) and reads its response.
func roundTrip(c net.Conn, br *bufio.Reader, dst netip.AddrPort, r HTTPRequest, nonce string) (HTTPResult, error) {
	var b strings.Builder
	host := dst.String()
	var extra []string
	for _, h := range r.Header {
		name, value, _ := strings.Cut(h, ":")
		if strings.EqualFold(strings.TrimSpace(name), "host") {
			host = strings.TrimSpace(value)
			continue
		}
		extra = append(extra, strings.TrimSpace(name)+": "+strings.TrimSpace(value))
	}
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n", r.Method, r.Path, host, nonceHeader, nonce)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		return HTTPResult{}, classify(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: r.Method})
	if err != nil {
		return HTTPResult{}, classify(err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if err != nil {
		return HTTPResult{Status: resp.StatusCode}, classify(err)
	}
	return HTTPResult{Status: resp.StatusCode, Body: string(body)}, nil
}

// RunHTTP probes every ordered pair of distinct endpoints with one HTTP
// request on a fresh connection to port, over address family o.Family
// (0: every family the lab has, each pair once per family, as Run): each
// cell gets the status (0: no connection) and whether the server received
// the request.
func RunHTTP(ctx context.Context, lab *topology.Spec, port int, req HTTPRequest, o Options) ([]Cell, error) {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 256
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d is not a port number (1-65535)", port)
	}
	fams, err := Families(lab, o.Family)
	if err != nil {
		return nil, err
	}
	srv, err := ListenHTTP(lab, port)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	var cells []Cell
	for _, fam := range fams {
		for i := range lab.Endpoints {
			for j := range lab.Endpoints {
				if i != j {
					cells = append(cells, Cell{From: lab.Endpoints[i].ID(), To: lab.Endpoints[j].ID(), Protocol: "tcp", Port: port,
						Family: fam, Method: req.Method, Path: req.Path})
				}
			}
		}
	}
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i := range cells {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := &cells[i]
			src, _ := lab.Endpoint(c.From)
			dst, _ := lab.Endpoint(c.To)
			nonce := Nonce()
			res := SendHTTP(ctx, src.Netns, netip.AddrPortFrom(httpAddr(dst, c.Family), uint16(port)), []HTTPRequest{req}, []string{nonce}, o.Timeout)[0]
			st := res.Status
			c.Status = &st
			c.Allowed = st >= 200 && st < 300
			c.Reached = srv.Received(nonce) != ""
			if res.Err != nil && !isTimeoutErr(res.Err) {
				c.Error = res.Err.Error()
			}
			if c.Allowed && !strings.HasPrefix(res.Body, dst.ID()+" ") {
				c.Error = fmt.Sprintf("answered by another server: %q", strings.TrimSpace(res.Body))
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(cells, func(i, j int) bool {
		if cells[i].From != cells[j].From {
			return cells[i].From < cells[j].From
		}
		return cells[i].To < cells[j].To
	})
	return cells, nil
}

// httpAddr is an endpoint's address of family fam (0, or one it lacks:
// its primary address).
func httpAddr(ep *topology.Endpoint, fam int) netip.Addr {
	if a, ok := ep.Addr(fam); ok {
		return a
	}
	return ep.IP
}

func isTimeoutErr(err error) bool { return err != nil && isTimeout(err) }

// ExpectHTTP sets every cell's ExpectedStatus (and Expected) from the
// policy model and returns the cells that differ: another status, a
// request the server received although it was denied (403 or no
// connection), or an allowed one it never received.
func ExpectHTTP(lab *topology.Spec, m *policy.Model, cells []Cell, req HTTPRequest) []Cell {
	var wrong []Cell
	for i := range cells {
		c := &cells[i]
		src, _ := lab.Endpoint(c.From)
		dst, _ := lab.Endpoint(c.To)
		host := netip.AddrPortFrom(httpAddr(dst, c.Family), uint16(c.Port)).String()
		v := m.HTTPVerdict(src, dst, c.Port, req.Model(host))
		if c.Family != 0 {
			v, _ = m.HTTPVerdictFamily(src, dst, c.Family, c.Port, req.Model(host))
		}
		st := v.Status
		exp := st >= 200 && st < 300
		c.ExpectedStatus, c.Expected = &st, &exp
		got := 0
		if c.Status != nil {
			got = *c.Status
		}
		if got != st || c.Reached != exp || c.Error != "" && exp {
			wrong = append(wrong, *c)
		}
	}
	return wrong
}
