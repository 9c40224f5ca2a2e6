package probe

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
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
	// What the checks found wrong (empty when the result matches the
	// model): filled by CheckService.
	Mismatches []string `json:"mismatches,omitempty"`
	// Notes are checks that could not conclude (too few connections to
	// require every backend).
	Notes []string `json:"notes,omitempty"`

	exp        service.Expectation
	badSource  []string // a backend saw another source than it should
	badReplier []string // a UDP reply came from another address than the Service's
	errs       map[string]int
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
	var clients []*topology.Endpoint
	if o.From == nil {
		for i := range lab.Endpoints {
			clients = append(clients, &lab.Endpoints[i])
		}
	} else {
		for _, ref := range o.From {
			ep, err := lab.Endpoint(ref)
			if err != nil {
				return nil, err
			}
			clients = append(clients, ep)
		}
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
		if err := srv.identify(ep, f.Protocol, b.Port); err != nil {
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
		r := &out[i]
		*r = ServiceResult{From: c.ID(), Backends: map[string]int{}, Expected: e.Expected, exp: e, errs: map[string]int{}}
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
					id, saw, replier, local, err := identify(ctx, c.Netns, target, f.Protocol, o.Timeout)
					mu.Lock()
					defer mu.Unlock()
					if local.IsValid() {
						udpFlows = append(udpFlows, netip.AddrPortFrom(c.IP, local.Port()))
					}
					if err != nil || id == "" {
						r.Failed++
						if err != nil {
							r.errs[err.Error()]++
						}
						return
					}
					r.Backends[id]++
					masq := e.Masqueraded || (id == c.ID() && !e.HairpinLocal) // a hairpin is masqueraded, but over loopback
					want := sourceOf(e, id)
					switch {
					case want.IsValid() && saw != want:
						r.badSource = append(r.badSource, fmt.Sprintf("%s saw the connection come from %s, not from %s as the model says", id, saw, want))
					case !masq && saw != c.IP:
						r.badSource = append(r.badSource, fmt.Sprintf("%s saw the connection come from %s, not from the client's address %s", id, saw, c.IP))
					case masq && saw == c.IP:
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
			for _, id := range e.Expected {
				if r.Backends[id] == 0 && answered >= k/2 {
					r.Mismatches = append(r.Mismatches, fmt.Sprintf("%s never answered in %d connections (a miss has probability below %g if the proxy picks evenly)", id, k, missProbability))
				}
			}
			if n := len(e.Expected); n > 1 && answered >= 5*n {
				chi := 0.0
				want := float64(answered) / float64(n)
				for _, id := range e.Expected {
					d := float64(r.Backends[id]) - want
					chi += d * d / want
				}
				if crit := stats.ChiSquareCritical(n-1, alpha); chi > crit {
					r.Mismatches = append(r.Mismatches, fmt.Sprintf("uneven spread over %d backends: χ² = %.1f > %.1f (α = %g)", n, chi, crit, alpha))
				}
			}
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

func setString(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

func errorSummary(errs map[string]int) string {
	if len(errs) == 0 {
		return " (timed out)"
	}
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range errs {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%d %s", errs[k], k))
	}
	return " (" + strings.Join(parts, ", ") + ")"
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
			return "", saw, replier, local, classify(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, err = bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return "", saw, replier, local, fmt.Errorf("connected, but no answer: %w", err)
		}
	} else {
		var pc net.PacketConn
		err = netns.Do(ns, func() error {
			var err error
			pc, err = net.ListenPacket("udp4", ":0")
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
	f := strings.Fields(line)
	if len(f) != 2 {
		return "", saw, replier, local, fmt.Errorf("unexpected answer %q", line)
	}
	ap, perr := netip.ParseAddrPort(f[1])
	if perr != nil {
		return "", saw, replier, local, fmt.Errorf("unexpected answer %q", line)
	}
	return f[0], ap.Addr().Unmap(), replier, local, nil
}

// identify makes ep listen on proto/port on every address and answer each
// connection or datagram with "NAMESPACE/NAME SRC:PORT\n".
func (s *servers) identify(ep *topology.Endpoint, proto string, port uint16) error {
	addr := fmt.Sprintf(":%d", port)
	answer := func(from netip.AddrPort) []byte {
		return []byte(fmt.Sprintf("%s %s\n", ep.ID(), netip.AddrPortFrom(from.Addr().Unmap(), from.Port())))
	}
	if proto == "tcp" {
		return s.serveTCP(ep, "tcp4", addr, func(c net.Conn) {
			_, _ = c.Write(answer(c.RemoteAddr().(*net.TCPAddr).AddrPort()))
			c.Close()
		})
	}
	return s.serveUDP(ep, "udp4", addr, func(pc net.PacketConn, _ []byte, from net.Addr) {
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
