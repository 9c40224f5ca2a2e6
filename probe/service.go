package probe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/stats"
	"github.com/cnlab/cnlab/topology"
)

// ServiceResult is what one client saw of a Service port: how many of its
// fresh connections (or UDP sockets) each backend answered, how many
// failed, and the backends the model allows it (the JSON of `cnlab probe
// --service`, contract).
type ServiceResult struct {
	From     string         `json:"from"`
	Backends map[string]int `json:"backends"`
	Failed   int            `json:"failed"`
	Expected []string       `json:"expected"`
	// With an HTTP request (--http, or a port with L7 rules): how many
	// answers came with each status, and the status the model gives each
	// expected backend. A 403 of the L7 proxy names no backend: it counts
	// here, not in Backends.
	Statuses         map[string]int `json:"statuses,omitzero"`
	ExpectedStatuses map[string]int `json:"expectedStatuses,omitzero"`
	// What the checks found wrong (empty when the result matches the
	// model): filled by CheckService.
	Mismatches []string `json:"mismatches,omitempty"`
	// Notes are checks that could not conclude (too few connections to
	// require every backend).
	Notes []string `json:"notes,omitempty"`

	exp        service.Expectation
	badSource  []string       // a backend saw another source than it should
	badReplier []string       // a UDP reply came from another address than the Service's
	errs       map[string]int // failures by cause (errorCause)
	proxied    map[string]bool
}

// ServiceOptions tune a service probe.
type ServiceOptions struct {
	// Connections per client; 0: DefaultConnections for the number of
	// backends the client may reach.
	Connections int
	// Timeout of one connection (default 1s).
	Timeout time.Duration
	// From restricts the clients to these endpoints (namespace/name);
	// nil: every endpoint of the lab.
	From []string
	// Parallel bounds each client's connections in flight (default 16).
	Parallel int
	// NodeHost, when set, probes the frontend's node port on that host
	// (at service.NodeAddress) instead of its cluster IP.
	NodeHost string
	// HTTP, when set (a TCP frontend only), makes each connection send
	// this request: every backend's listener speaks HTTP/1.1 and answers
	// with its name and the source it saw (NeedsHTTP says when a probe
	// must, and DefaultServiceRequest is what it sends then).
	HTTP *HTTPRequest
}

// DefaultServiceRequest is the request a service probe sends when the
// frontend reaches a backend whose port has L7 rules and no --http was
// given: an L7 proxy waits for a request, so the backend-speaks-first
// exchange would get no answer.
var DefaultServiceRequest = HTTPRequest{Method: "GET", Path: "/"}

// NeedsHTTP reports whether probing f from any client reaches a backend
// whose port has L7 rules for it (a proxied choice of the model).
func NeedsHTTP(m *service.Model, f *service.Frontend, from []string) bool {
	if f.Protocol != "tcp" {
		return false
	}
	clients, err := serviceClients(m.Lab, from)
	if err != nil {
		return false
	}
	for _, c := range clients {
		for _, ch := range m.Expect(c, f).Choices {
			if ch.Proxied {
				return true
			}
		}
	}
	return false
}

func serviceClients(lab *topology.Spec, from []string) ([]*topology.Endpoint, error) {
	var clients []*topology.Endpoint
	if from == nil {
		for i := range lab.Endpoints {
			clients = append(clients, &lab.Endpoints[i])
		}
		return clients, nil
	}
	for _, ref := range from {
		ep, err := lab.Endpoint(ref)
		if err != nil {
			return nil, err
		}
		clients = append(clients, ep)
	}
	return clients, nil
}

// missProbability is the chance, with DefaultConnections, that a client
// reaching n backends uniformly at random misses one of them: at most
// n·(1−1/n)^K ≤ n·e^(−K/n), which K = n·ln(n/p) brings to p.
const missProbability = 1e-6

// DefaultConnections is the number of connections that makes missing one
// of n equally likely backends improbable (below missProbability):
// ⌈n·ln(n/p)⌉, and at least 20.
func DefaultConnections(n int) int {
	if n <= 1 {
		return 20
	}
	return max(20, int(math.Ceil(float64(n)*math.Log(float64(n)/missProbability))))
}

// DefaultAlpha is the level of the spread check of `probe --service
// --expect`: a fair proxy fails it once in a thousand probes of a client.
// A test suite making hundreds of such checks uses a smaller one.
const DefaultAlpha = 1e-3

// ProbeService opens fresh connections from every client to frontend f and
// records which backend answered each. Every backend that is a lab
// endpoint listens on its target port for the probe's duration and
// answers with its name and the source address it saw.
func ProbeService(ctx context.Context, m *service.Model, f *service.Frontend, o ServiceOptions) ([]ServiceResult, error) {
	lab := m.Lab
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.HTTP != nil && f.Protocol != "tcp" {
		return nil, fmt.Errorf("%s is %s: an HTTP request needs TCP", f.Key(), f.Protocol)
	}
	clients, err := serviceClients(lab, o.From)
	if err != nil {
		return nil, err
	}
	srv := &servers{}
	defer srv.close()
	listening := map[netip.AddrPort]bool{}
	for _, b := range f.Backends {
		if b.Endpoint == "" || listening[b.AddrPort()] {
			continue
		}
		ep, err := lab.Endpoint(b.Endpoint)
		if err != nil {
			return nil, err
		}
		if o.HTTP != nil {
			err = srv.identifyHTTP(ep, b.Port, b.IP.Is6())
		} else {
			err = srv.identify(ep, f.Protocol, b.Port, b.IP.Is6())
		}
		if err != nil {
			return nil, err
		}
		listening[b.AddrPort()] = true
	}
	out := make([]ServiceResult, len(clients))
	var udpFlows []netip.AddrPort
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range clients {
		e := m.Expect(c, f)
		if o.NodeHost != "" {
			var err error
			if e, err = m.ExpectNodePort(c, f, o.NodeHost); err != nil {
				return nil, err
			}
		}
		target := e.Target
		k := o.Connections
		if k <= 0 {
			k = DefaultConnections(len(e.Expected))
		}
		cip, _ := c.Addr(f.Family()) // the client's address of the frontend's family
		r := &out[i]
		*r = ServiceResult{From: c.ID(), Backends: map[string]int{}, Expected: e.Expected, exp: e, errs: map[string]int{}, proxied: map[string]bool{}}
		if o.HTTP != nil {
			r.Statuses, r.ExpectedStatuses = map[string]int{}, map[string]int{}
			for _, ch := range e.Choices {
				if !ch.Reachable || ch.Backend.Endpoint == "" {
					continue
				}
				ep, _ := lab.Endpoint(ch.Backend.Endpoint)
				host := target.String()
				if ch.Hairpin && e.HairpinLocal {
					// over loopback, straight to the backend: no proxy
					r.ExpectedStatuses[ep.ID()] = 200
					continue
				}
				r.ExpectedStatuses[ep.ID()] = service.HTTPVerdict(m.Policy, c, ep, f, int(ch.Backend.Port), o.HTTP.Model(host)).Status
				r.proxied[ep.ID()] = ch.Proxied
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, o.Parallel)
			var cw sync.WaitGroup
			for j := range k {
				if j == 1 && f.Affinity > 0 {
					// With ClientIP affinity the first connection goes
					// alone: until the proxy has recorded it (iptables'
					// recent --set, nftables' update @set), concurrent
					// first connections of one client each draw a
					// backend, in a cluster as here.
					cw.Wait()
				}
				cw.Add(1)
				sem <- struct{}{}
				go func() {
					defer cw.Done()
					defer func() { <-sem }()
					var id string
					var saw netip.Addr
					var replier, local netip.AddrPort
					var err error
					status := 0
					if o.HTTP != nil {
						id, saw, status, err = identifyHTTP(ctx, c.Netns, target, *o.HTTP, o.Timeout)
					} else {
						id, saw, replier, local, err = identify(ctx, c.Netns, target, f.Protocol, o.Timeout)
					}
					mu.Lock()
					defer mu.Unlock()
					if local.IsValid() {
						udpFlows = append(udpFlows, netip.AddrPortFrom(cip, local.Port()))
					}
					if status != 0 {
						r.Statuses[fmt.Sprint(status)]++
					}
					if err != nil || (id == "" && status == 0) {
						r.Failed++
						r.errs[errorCause(err, o.Timeout)]++
						return
					}
					if id == "" {
						return // the L7 proxy answered (403): no backend named
					}
					r.Backends[id]++
					if r.proxied[id] {
						return // the proxy's own connection: another source
					}
					masq := e.Masqueraded || (id == c.ID() && !e.HairpinLocal) // a hairpin is masqueraded, but over loopback
					want := sourceOf(e, id)
					switch {
					case want.IsValid() && saw != want:
						r.badSource = append(r.badSource, fmt.Sprintf("%s saw the connection come from %s, not from %s as the model says", id, saw, want))
					case !masq && saw != cip:
						r.badSource = append(r.badSource, fmt.Sprintf("%s saw the connection come from %s, not from the client's address %s", id, saw, cip))
					case masq && saw == cip:
						r.badSource = append(r.badSource, fmt.Sprintf("%s saw the client's own address %s: the proxy did not masquerade", id, saw))
					}
					if f.Protocol == "udp" && replier != target {
						r.badReplier = append(r.badReplier, fmt.Sprintf("a reply came from %s, not from the address connected to, %s", replier, target))
					}
				}()
			}
			cw.Wait()
		}()
	}
	wg.Wait()
	if err := forgetUDP(ctx, lab, udpFlows); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].From < out[j].From })
	return out, nil
}

// sourceOf is the source the model says backend id sees, if it says.
func sourceOf(e service.Expectation, id string) netip.Addr {
	for _, c := range e.Choices {
		if c.Backend.Endpoint == id {
			return c.Source
		}
	}
	return netip.Addr{}
}

// CheckService compares each result with the model's expectation, sets
// its Mismatches and Notes, and returns the number of results that
// mismatch. The checks: no answer from a backend outside the expected
// set; every expected backend answered (when the client made enough
// connections to make a miss improbable, and had no affinity); the
// answers spread evenly over the expected backends (a χ² test at level
// alpha when each expects at least 5); with ClientIP affinity, one
// backend answered all; no connection failed unless the model says some
// may (a backend the client cannot reach) or the Service refuses; each
// backend saw the client's own address (another one on hairpin); UDP
// replies came from the Service's address.
func CheckService(f *service.Frontend, results []ServiceResult, connections int, alpha float64) int {
	bad := 0
	for i := range results {
		r := &results[i]
		e := r.exp
		r.Mismatches, r.Notes = nil, nil
		k := connections
		if k <= 0 {
			k = DefaultConnections(len(e.Expected))
		}
		var ids []string
		answered := 0
		for id, n := range r.Backends {
			ids = append(ids, id)
			answered += n
		}
		slices.Sort(ids)
		for _, id := range ids {
			if !slices.Contains(e.Expected, id) {
				r.Mismatches = append(r.Mismatches, fmt.Sprintf("%d connections reached %s, which the model does not allow (expected %s)", r.Backends[id], id, setString(e.Expected)))
			}
		}
		switch {
		case e.Refused && answered > 0:
			// reported above: nothing is expected
		case f.Affinity > 0 && len(r.Backends) > 1:
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("ClientIP affinity: %d backends answered (%s), want one", len(r.Backends), strings.Join(ids, ", ")))
		case f.Affinity == 0 && len(e.Expected) > 0:
			if k < DefaultConnections(len(e.Expected)) {
				r.Notes = append(r.Notes, fmt.Sprintf("every backend answering was not checked: %d connections are too few for %d backends (%d make a miss improbable)", k, len(e.Expected), DefaultConnections(len(e.Expected))))
				break
			}
			// With HTTP, a backend the model gives 403 is answered by the
			// L7 proxy, which names no backend: the 2xx backends are
			// judged by name (their share of the 2xx answers is even
			// still), the 403 ones by the 403 answers (checkStatuses).
			named, namedAnswers := e.Expected, answered
			if r.Statuses != nil {
				named = slices.DeleteFunc(slices.Clone(e.Expected), func(id string) bool { return !ok2xx(r.ExpectedStatuses[id]) })
				namedAnswers = 0
				for _, id := range named {
					namedAnswers += r.Backends[id]
				}
			}
			for _, id := range named {
				if r.Backends[id] == 0 && k-r.Failed >= k/2 {
					r.Mismatches = append(r.Mismatches, fmt.Sprintf("%s never answered in %d connections (a miss has probability below %g if the proxy picks evenly)", id, k, missProbability))
				}
			}
			if n := len(named); n > 1 && namedAnswers >= 5*n {
				chi := 0.0
				want := float64(namedAnswers) / float64(n)
				for _, id := range named {
					d := float64(r.Backends[id]) - want
					chi += d * d / want
				}
				if crit := stats.ChiSquareCritical(n-1, alpha); chi > crit {
					r.Mismatches = append(r.Mismatches, fmt.Sprintf("uneven spread over %d backends: χ² = %.1f > %.1f (α = %g)", n, chi, crit, alpha))
				}
			}
		}
		if r.Statuses != nil && !e.Refused {
			r.Mismatches = append(r.Mismatches, checkStatuses(r, k, f.Affinity > 0)...)
		}
		if r.Failed > 0 && !e.MayFail && !e.Refused {
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("%d of %d connections failed although the model allows every backend%s", r.Failed, k, errorSummary(r.errs)))
		}
		if e.Refused && r.Failed < k {
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("%d of %d connections got an answer, but the Service refuses them: %s", k-r.Failed, k, e.Note))
		}
		r.Mismatches = append(r.Mismatches, firstOf(r.badSource)...)
		r.Mismatches = append(r.Mismatches, firstOf(r.badReplier)...)
		if len(r.Mismatches) > 0 {
			bad++
		}
	}
	return bad
}

func ok2xx(status int) bool { return status >= 200 && status < 300 }

// checkStatuses judges the statuses of an HTTP service probe against the
// model's status for each expected backend: a backend named in a 2xx
// answer must be one the model gives 2xx; 403s (the L7 proxy's, naming no
// backend) only when the model gives some expected backend 403, and then
// at least one in k connections without affinity (missing every such backend is as
// improbable as missing any one backend); no other status.
func checkStatuses(r *ServiceResult, k int, affinity bool) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(r.Backends)) {
		if want, ok := r.ExpectedStatuses[id]; ok && !ok2xx(want) {
			out = append(out, fmt.Sprintf("%s answered %d requests with 200, but the model says %d for it", id, r.Backends[id], want))
		}
	}
	var denied []string
	for _, id := range r.Expected {
		if r.ExpectedStatuses[id] == 403 {
			denied = append(denied, id)
		}
	}
	for _, st := range slices.Sorted(maps.Keys(r.Statuses)) {
		n := r.Statuses[st]
		switch {
		case st == "403" && len(denied) == 0:
			out = append(out, fmt.Sprintf("%d requests got 403, but the model allows the request on every backend it may reach (%s)", n, setString(r.Expected)))
		case st != "403" && !strings.HasPrefix(st, "2"):
			out = append(out, fmt.Sprintf("%d requests got status %s, which the model never gives", n, st))
		}
	}
	if len(denied) > 0 && !affinity && r.Statuses["403"] == 0 && k-r.Failed >= k/2 && k >= DefaultConnections(len(r.Expected)) {
		out = append(out, fmt.Sprintf("no request got 403 in %d connections, but the model says %s for %s", k, "403", strings.Join(denied, ", ")))
	}
	return out
}

func setString(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

// errorSummary names each cause of the failed connections once, with
// its count, the most frequent first: " (30 connections: no answer within
// 1s (i/o timeout))".
func errorSummary(errs map[string]int) string {
	if len(errs) == 0 {
		return ""
	}
	causes := slices.Collect(maps.Keys(errs))
	slices.SortFunc(causes, func(a, b string) int {
		if errs[a] != errs[b] {
			return errs[b] - errs[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, c := range causes {
		parts = append(parts, plural.N(errs[c], "connection")+": "+c)
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// connError is a failed connection and the stage it failed at.
type connError struct {
	stage string // "no connection", "connected, but no answer"
	err   error
}

func (e *connError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// errorCause is what made a connection fail, without what differs from
// one connection to the next (addresses, ports), so that the failures of
// a client add up to a few causes: "no answer within 1s (i/o timeout)",
// "no connection: connection refused". nil is a timeout with no error
// (a UDP probe's tries all unanswered).
func errorCause(err error, timeout time.Duration) string {
	stage := ""
	var ce *connError
	if errors.As(err, &ce) {
		stage = ce.stage
	}
	if err == nil || isTimeout(err) {
		switch stage {
		case "", "connected, but no answer":
			return fmt.Sprintf("no answer within %v (i/o timeout)", timeout)
		}
		return fmt.Sprintf("%s within %v (i/o timeout)", stage, timeout)
	}
	msg := ""
	var oe *net.OpError
	var se *os.SyscallError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		msg = "closed without an answer (EOF)"
	case errors.As(err, &se):
		msg = se.Err.Error()
	case errors.As(err, &oe):
		msg = oe.Err.Error()
	default:
		msg = err.Error()
		if ce != nil {
			msg = ce.err.Error()
		}
	}
	if stage != "" {
		return stage + ": " + msg
	}
	return msg
}

// firstOf keeps a list of the same complaint short: the first, and how
// many more.
func firstOf(s []string) []string {
	switch len(s) {
	case 0:
		return nil
	case 1:
		return s
	}
	return []string{fmt.Sprintf("%s (and %d more)", s[0], len(s)-1)}
}

// identify opens one fresh connection (TCP) or socket (UDP) from inside
// ns to the Service address and reads the backend's answer: its endpoint
// name and the source address it saw. For UDP it also returns the address
// the reply came from, and the local address (for forgetting the flow).
func identify(ctx context.Context, ns string, dst netip.AddrPort, proto string, timeout time.Duration) (id string, saw netip.Addr, replier, local netip.AddrPort, err error) {
	var line string
	if proto == "tcp" {
		var c net.Conn
		err = netns.Do(ns, func() error {
			d := net.Dialer{Timeout: timeout}
			var err error
			c, err = d.DialContext(ctx, "tcp", dst.String())
			return err
		})
		if err != nil {
			if e := classify(err); e != nil {
				err = e
			}
			return "", saw, replier, local, &connError{"no connection", err}
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, err = bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return "", saw, replier, local, &connError{"connected, but no answer", err}
		}
	} else {
		var pc net.PacketConn
		err = netns.Do(ns, func() error {
			var err error
			pc, err = net.ListenPacket(netOf("udp", dst.Addr().Is6()), ":0")
			return err
		})
		if err != nil {
			return "", saw, replier, local, err
		}
		defer pc.Close()
		// Unconnected, the socket is bound to 0.0.0.0: name the flow by
		// the client's own address, as conntrack does.
		local = pc.LocalAddr().(*net.UDPAddr).AddrPort()
		buf := make([]byte, 512)
		const tries = 3
		for i := 0; i < tries && line == ""; i++ {
			if _, err := pc.WriteTo([]byte("cnlab-probe-service\n"), net.UDPAddrFromAddrPort(dst)); err != nil {
				return "", saw, replier, local, classify(err)
			}
			_ = pc.SetReadDeadline(time.Now().Add(timeout / tries))
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if !isTimeout(err) {
					return "", saw, replier, local, classify(err)
				}
				continue
			}
			replier = from.(*net.UDPAddr).AddrPort()
			replier = netip.AddrPortFrom(replier.Addr().Unmap(), replier.Port())
			line = string(buf[:n])
		}
		if line == "" {
			return "", saw, replier, local, nil // timed out
		}
	}
	id, saw, err = parseAnswer(line)
	return id, saw, replier, local, err
}

// parseAnswer reads a backend's answer "NAMESPACE/NAME SRC:PORT\n".
func parseAnswer(line string) (id string, saw netip.Addr, err error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return "", saw, fmt.Errorf("unexpected answer %q", line)
	}
	ap, perr := netip.ParseAddrPort(f[1])
	if perr != nil {
		return "", saw, fmt.Errorf("unexpected answer %q", line)
	}
	return f[0], ap.Addr().Unmap(), nil
}

// identifyHTTP sends req on one fresh connection from inside ns to the
// Service address and reads the answer: its status, and for an answer of
// a backend (its listener's body) the backend's name and the source
// address it saw. An L7 proxy's own answer (403 "Access denied") names no
// backend: id "".
func identifyHTTP(ctx context.Context, ns string, dst netip.AddrPort, req HTTPRequest, timeout time.Duration) (id string, saw netip.Addr, status int, err error) {
	c, err := dialTCP(ctx, ns, dst, timeout)
	if err != nil {
		if e := classify(err); e != nil {
			err = e
		}
		return "", saw, 0, &connError{"no connection", err}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	res, err := roundTrip(c, bufio.NewReader(c), dst, req, Nonce())
	if err != nil {
		if res.Status == 0 {
			return "", saw, 0, &connError{"connected, but no answer", err}
		}
		return "", saw, res.Status, err
	}
	if !strings.HasPrefix(res.Body, backendPrefix) {
		if res.Status >= 200 && res.Status < 300 {
			return "", saw, res.Status, fmt.Errorf("unexpected answer %d %q", res.Status, res.Body)
		}
		return "", saw, res.Status, nil
	}
	id, saw, err = parseAnswer(strings.TrimPrefix(res.Body, backendPrefix))
	return id, saw, res.Status, err
}

// backendPrefix starts the body of a service probe's HTTP listener, so
// that no other answer (an L7 proxy's) is taken for a backend's.
const backendPrefix = "cnlab-backend "

// identifyHTTP makes ep listen on TCP port on every address, speak
// HTTP/1.1 and answer every request 200 with "cnlab-backend
// NAMESPACE/NAME SRC:PORT\n" (and the name in the header
// X-Cnlab-Backend).
func (s *servers) identifyHTTP(ep *topology.Endpoint, port uint16, six bool) error {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from, _ := netip.ParseAddrPort(r.RemoteAddr)
		w.Header().Set("X-Cnlab-Backend", ep.ID())
		fmt.Fprintf(w, "%s%s %s\n", backendPrefix, ep.ID(), netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
	}), ReadHeaderTimeout: 10 * time.Second}
	var ln net.Listener
	addr := fmt.Sprintf(":%d", port)
	err := netns.Do(ep.Netns, func() error {
		var err error
		ln, err = net.Listen(netOf("tcp", six), addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("listen on tcp %s in %s: %w (is something else using the port?)", addr, ep.ID(), err)
	}
	s.add(func() { srv.Close() })
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = srv.Serve(ln) }()
	return nil
}

// netOf is the network of proto ("tcp", "udp") for one family (six:
// IPv6): a backend listens on the family of its address in the slice.
func netOf(proto string, six bool) string {
	if six {
		return proto + "6"
	}
	return proto + "4"
}

// identify makes ep listen on proto/port on every address of a family
// (six: IPv6) and answer each connection or datagram with
// "NAMESPACE/NAME SRC:PORT\n".
func (s *servers) identify(ep *topology.Endpoint, proto string, port uint16, six bool) error {
	addr := fmt.Sprintf(":%d", port)
	answer := func(from netip.AddrPort) []byte {
		return []byte(fmt.Sprintf("%s %s\n", ep.ID(), netip.AddrPortFrom(from.Addr().Unmap(), from.Port())))
	}
	if proto == "tcp" {
		return s.serveTCP(ep, netOf("tcp", six), addr, func(c net.Conn) {
			_, _ = c.Write(answer(c.RemoteAddr().(*net.TCPAddr).AddrPort()))
			c.Close()
		})
	}
	return s.serveUDP(ep, netOf("udp", six), addr, func(pc net.PacketConn, _ []byte, from net.Addr) {
		_, _ = pc.WriteTo(answer(from.(*net.UDPAddr).AddrPort()), from)
	})
}

// MaxAffinityWait is the longest ClientIP timeout CheckAffinityExpiry
// waits out.
const MaxAffinityWait = 10 // seconds

// CheckAffinityExpiry checks that ClientIP affinity lets go after its
// timeout: it waits the timeout (plus a second) after the probe that gave
// first, probes again, and expects some client to land on another backend.
// Re-drawn at random, every client keeps its backend with probability
// Π 1/nᵢ (nᵢ: its expected backends); the check fails only when that is
// below 10⁻³, and otherwise says it could not conclude. It returns a
// mismatch ("" for none) and a note ("" for none).
func CheckAffinityExpiry(ctx context.Context, m *service.Model, f *service.Frontend, o ServiceOptions, first []ServiceResult) (mismatch, note string, err error) {
	if f.Affinity == 0 {
		return "", "", nil
	}
	if f.Affinity > MaxAffinityWait {
		return "", fmt.Sprintf("affinity expiry not checked: its timeout (%d s) is longer than %d s", f.Affinity, MaxAffinityWait), nil
	}
	before := map[string]string{}
	pSame := 1.0
	for _, r := range first {
		if len(r.Backends) != 1 || len(r.exp.Expected) < 2 {
			continue
		}
		for id := range r.Backends {
			before[r.From] = id
		}
		pSame /= float64(len(r.exp.Expected))
	}
	if len(before) == 0 {
		return "", "affinity expiry not checked: no client has two backends to choose from", nil
	}
	select {
	case <-ctx.Done():
		return "", "", ctx.Err()
	case <-time.After(time.Duration(f.Affinity+1) * time.Second):
	}
	o.Connections = 3
	again, err := ProbeService(ctx, m, f, o)
	if err != nil {
		return "", "", err
	}
	changed := 0
	for _, r := range again {
		if old, ok := before[r.From]; ok && r.Backends[old] < sum(r.Backends) {
			changed++
		}
	}
	switch {
	case changed > 0:
		return "", "", nil
	case pSame < 1e-3:
		return fmt.Sprintf("ClientIP affinity did not expire: %d s after the timeout no client of %d moved to another backend (probability %.1g if re-drawn at random)", 1, len(before), pSame), "", nil
	}
	return "", fmt.Sprintf("affinity expiry inconclusive: no client moved, which re-drawing does with probability %.2g", pSame), nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
