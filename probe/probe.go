// Package probe measures a lab's connectivity matrix with real packets:
// it starts its own listeners on every endpoint, then, for every ordered
// pair of distinct endpoints and every target (protocol, port), tries a
// TCP connect or a UDP request/reply, all in parallel with short timeouts.
// It never changes policy; it only observes.
package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Target is a protocol ("tcp", "udp", "sctp") and a port.
type Target struct {
	Protocol string
	Port     int
}

func (t Target) String() string { return fmt.Sprintf("%s/%d", t.Protocol, t.Port) }

// Cell is the observed verdict for one ordered pair and target.
type Cell struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
	// Family is the address family probed, 4 or 6: the cell connects
	// the source's address of that family to the destination's.
	Family   int    `json:"family,omitempty"`
	Allowed  bool   `json:"allowed"`
	Expected *bool  `json:"expected,omitempty"`
	Error    string `json:"error,omitempty"` // neither allowed nor a clean timeout
	// With an HTTP probe (http.go): the request, the status received (0
	// when no connection could be made), the status the model expects,
	// and whether the server received the request.
	Method         string `json:"method,omitempty"`
	Path           string `json:"path,omitempty"`
	Status         *int   `json:"status,omitempty"`
	ExpectedStatus *int   `json:"expectedStatus,omitempty"`
	Reached        bool   `json:"reached,omitempty"`
}

// Expect sets every cell's Expected to the policy model's verdict and
// returns the cells that do not match it (Matches): what `probe --expect`
// fails on.
func Expect(lab *topology.Spec, m *policy.Model, cells []Cell) []Cell {
	var wrong []Cell
	for i := range cells {
		src, _ := lab.Endpoint(cells[i].From)
		dst, _ := lab.Endpoint(cells[i].To)
		exp := m.VerdictOf(party(src, cells[i].Family), party(dst, cells[i].Family), cells[i].Protocol, cells[i].Port).Allowed
		cells[i].Expected = &exp
		if !cells[i].Matches() {
			wrong = append(wrong, cells[i])
		}
	}
	return wrong
}

// party is an endpoint as the model judges it over family fam: its
// address of that family (its primary address when fam is 0 or it has
// none of that family).
func party(ep *topology.Endpoint, fam int) policy.Party {
	p := policy.EndpointParty(ep)
	if a, ok := ep.Addr(fam); ok {
		p.Addr = a
	}
	return p
}

// Matches reports whether the probe saw what the model expects: allowed
// where it allows, and a clean timeout (or the eBPF connect hook's
// refusal) where it denies. An attempt that failed with an error
// (unreachable, an unexpected reset) proves nothing about policy, so it
// never matches. A cell without an expectation matches.
func (c Cell) Matches() bool {
	return c.Expected == nil || *c.Expected == c.Allowed && c.Error == ""
}

// Options tune a probe.
type Options struct {
	// Timeout after which an unanswered TCP connect or UDP request counts
	// as denied (default 1s; UDP sends again after a third and two thirds
	// of it). Run lengthens it for a second pass over the denied cells
	// when it is under 4 times the slowest answer it saw.
	Timeout time.Duration
	// Parallel bounds the attempts in flight. Run's default is every
	// attempt at once, as far as the process's descriptor limit allows;
	// the HTTP and service probes default to 256 and 16.
	Parallel int
	// Stats, when set, receives how Run probed.
	Stats *Stats
	// Family is the address family to probe, 4 or 6; 0 probes every
	// family the lab has (topology.Spec.Families), each pair once per
	// family.
	Family int
}

// Families returns the families a probe with family fam (0: all) covers
// in lab, or an error naming the lab's when it has not that one.
func Families(lab *topology.Spec, fam int) ([]int, error) {
	switch fam {
	case 0:
		return lab.Families(), nil
	case 4, 6:
		if !lab.HasFamily(fam) {
			return nil, fmt.Errorf("lab %s has no IPv%d addresses (its families: %v)", lab.Name, fam, lab.Families())
		}
		return []int{fam}, nil
	}
	return nil, fmt.Errorf("address family %d: 4 or 6", fam)
}

// ErrUnsupported says the kernel cannot do a protocol (SCTP here).
var ErrUnsupported = errors.New("not supported by this kernel")

// ErrNeighbourTable says the kernel's ARP table is too small for the
// probe: its verdicts could not be trusted.
var ErrNeighbourTable = errors.New("the kernel's neighbour table is too small")

// Run probes every ordered pair of distinct endpoints for every target.
// Cells come back sorted by target, source, destination. How it goes about
// it, and why its "denied" can be trusted, is in matrix.go.
func Run(ctx context.Context, lab *topology.Spec, targets []Target, o Options) ([]Cell, error) {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	targets = append([]Target(nil), targets...) // normalized below; the caller's stay as given
	for i, t := range targets {
		t.Protocol = strings.ToLower(t.Protocol)
		targets[i] = t
		switch t.Protocol {
		case "tcp", "udp":
		case "sctp":
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_SCTP)
			if err != nil {
				return nil, fmt.Errorf("probe sctp: %w (opening an SCTP socket: %v): SCTP policies are compiled and installed, but cannot be probed here", ErrUnsupported, err)
			}
			syscall.Close(fd)
			return nil, errors.New("probe sctp: this kernel has SCTP, but the probe does not speak it yet (tcp, udp)")
		default:
			return nil, fmt.Errorf("unknown protocol %q (tcp, udp, sctp)", t.Protocol)
		}
		if t.Port < 1 || t.Port > 65535 {
			return nil, fmt.Errorf("port %d is not a port number (1-65535)", t.Port)
		}
	}
	fams, err := Families(lab, o.Family)
	if err != nil {
		return nil, err
	}
	if limit, ok := neighbourLimit(); ok && slices.Contains(fams, 4) && lab.Families()[0] == 4 {
		if need := neighboursNeeded(lab); need > limit {
			return nil, fmt.Errorf("%w: probing %s's %d endpoints needs about %d ARP entries at once, and the kernel keeps at most net.ipv4.neigh.default.gc_thresh3 = %d for all namespaces together (past it, packets are dropped and would read as denied): %s",
				ErrNeighbourTable, lab.Name, len(lab.Endpoints), need, limit, neighbourAdvice(need))
		}
	}
	srv := &servers{}
	defer srv.close()
	for _, fam := range fams {
		for i := range lab.Endpoints {
			a, ok := lab.Endpoints[i].Addr(fam)
			if !ok {
				continue
			}
			for _, t := range targets {
				if err := srv.listen(&lab.Endpoints[i], a, t); err != nil {
					return nil, err
				}
			}
		}
	}
	var jobs []job
	for _, fam := range fams {
		for i := range lab.Endpoints {
			src := &lab.Endpoints[i]
			sa, ok := src.Addr(fam)
			if !ok {
				continue
			}
			for _, t := range targets {
				for j := range lab.Endpoints {
					dst := &lab.Endpoints[j]
					da, ok := dst.Addr(fam)
					if i != j && ok {
						jobs = append(jobs, job{src: src, dst: dst, t: t, fam: fam, srcIP: sa, dstIP: da})
					}
				}
			}
		}
	}
	if o.Parallel <= 0 {
		o.Parallel = fdBudget(len(lab.Endpoints) * len(targets))
	}
	st := Stats{Cells: len(jobs), Parallel: min(o.Parallel, len(jobs)), Timeout: o.Timeout}
	fullsBefore := neighbourTableFulls()
	outs := probeAll(ctx, jobs, o.Timeout, o.Parallel)
	// A denied cell is trusted only when its timeout was margin times the
	// slowest answer: otherwise probe the denied cells again with such a
	// timeout (at most twice; the second pass is lighter).
	timeout := o.Timeout
	var earlier []netip.AddrPort // UDP sockets of passes since replaced
	for pass := 0; pass < 2 && ctx.Err() == nil; pass++ {
		slowest := time.Duration(0)
		for _, r := range outs {
			if r.allowed && r.rtt > slowest {
				slowest = r.rtt
			}
		}
		st.Slowest = max(st.Slowest, slowest)
		if timeout >= margin*st.Slowest || timeout >= maxTimeout {
			break
		}
		timeout = min(maxTimeout, (margin*st.Slowest).Round(100*time.Millisecond)+100*time.Millisecond)
		var again []job
		var where []int
		for i, r := range outs {
			if !r.allowed && r.err == nil {
				again = append(again, jobs[i])
				where = append(where, i)
			}
		}
		if len(again) == 0 {
			break
		}
		st.Reprobed += len(again)
		st.RetryTimeout = timeout
		for k, r := range probeAll(ctx, again, timeout, o.Parallel) {
			i := where[k]
			if r.allowed {
				st.Changed++
			}
			earlier = append(earlier, outs[i].udpLocal) // its flows are forgotten too
			outs[i] = r
		}
	}
	cells := make([]Cell, len(jobs))
	seen := map[netip.AddrPort]bool{}
	var udpFlows []netip.AddrPort
	addFlow := func(ap netip.AddrPort) {
		if ap.IsValid() && !seen[ap] {
			seen[ap] = true
			udpFlows = append(udpFlows, ap)
		}
	}
	for i, jb := range jobs {
		r := outs[i]
		c := Cell{From: jb.src.ID(), To: jb.dst.ID(), Protocol: jb.t.Protocol, Port: jb.t.Port, Family: jb.fam, Allowed: r.allowed}
		err := r.err
		if errors.Is(err, errRefused) && lab.EBPF.ConnectHook && jb.t.Protocol == "tcp" {
			err = nil // the eBPF connect hook refuses denied connects at once
		}
		if err != nil {
			c.Error = err.Error()
		}
		cells[i] = c
		addFlow(r.udpLocal)
	}
	for _, ap := range earlier {
		addFlow(ap)
	}
	if err := forgetUDP(ctx, lab, udpFlows); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if fullsBefore >= 0 {
		if d := neighbourTableFulls() - fullsBefore; d > 0 {
			limit, _ := neighbourLimit()
			return nil, fmt.Errorf("%w: the kernel refused %d ARP entries while the probe ran (net.ipv4.neigh.default.gc_thresh3 = %d for all namespaces, other labs' included), so a denied cell may be a dropped packet, not policy: %s",
				ErrNeighbourTable, d, limit, neighbourAdvice(neighboursNeeded(lab)))
		}
	}
	if o.Stats != nil {
		*o.Stats = st
	}
	sort.SliceStable(cells, func(i, j int) bool {
		a, b := cells[i], cells[j]
		if a.Protocol != b.Protocol || a.Port != b.Port {
			return a.Protocol < b.Protocol || (a.Protocol == b.Protocol && a.Port < b.Port)
		}
		if a.Family != b.Family {
			return a.Family < b.Family
		}
		if a.From != b.From {
			return a.From < b.From
		}
		return a.To < b.To
	})
	return cells, nil
}

// fdBudget is how many attempts may be in flight: the descriptors the
// process may open (Go raises the soft limit to the hard one), less the
// listeners and some room for the connections they accept.
func fdBudget(listeners int) int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 256
	}
	n := int(min(rl.Cur, 1<<20)) - 2*listeners - 512
	return max(n, 64)
}

// dialTCP connects from inside ns to dst.
func dialTCP(ctx context.Context, ns string, dst netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(ns, func() error {
		d := net.Dialer{Timeout: timeout}
		var err error
		c, err = d.DialContext(ctx, "tcp", dst.String())
		return err
	})
	return c, err
}

// forgetUDP deletes the conntrack entries of the probe's own UDP flows in
// every host. A UDP flow the probe saw answered would otherwise stay
// "established" for 30 s, and a later probe that happened to reuse its
// source port would pass whatever the policy says by then. Only the
// probe's flows are touched.
func forgetUDP(ctx context.Context, lab *topology.Spec, flows []netip.AddrPort) error {
	filters := map[netlink.InetFamily][]netlink.CustomConntrackFilter{}
	for _, f := range flows {
		if !f.IsValid() {
			continue
		}
		cf := &netlink.ConntrackFilter{}
		_ = cf.AddProtocol(17)
		_ = cf.AddIP(netlink.ConntrackOrigSrcIP, f.Addr().AsSlice())
		_ = cf.AddPort(netlink.ConntrackOrigSrcPort, f.Port())
		af := netlink.InetFamily(unix.AF_INET)
		if f.Addr().Unmap().Is6() {
			af = unix.AF_INET6
		}
		filters[af] = append(filters[af], cf)
	}
	if len(filters) == 0 {
		return nil
	}
	for _, h := range lab.Hosts {
		nh, err := netns.Handle(h.Netns)
		if err != nil {
			return err
		}
		for _, af := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
			if len(filters[af]) == 0 {
				continue
			}
			_, err = nh.ConntrackDeleteFilters(netlink.ConntrackTable, af, filters[af]...)
			if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPROTONOSUPPORT) {
				nh.Close()
				return fmt.Errorf("host %s: forget probe flows in conntrack: %w", h.Name, err)
			}
		}
		nh.Close()
	}
	// A datapath with its own connection tracking forgets them too.
	if dp, err := registry.New(lab.Datapath); err == nil {
		if f, ok := dp.(datapath.FlowForgetter); ok {
			if err := f.ForgetFlows(context.WithoutCancel(ctx), lab, 17, flows); err != nil {
				return fmt.Errorf("forget probe flows in the %s datapath: %w", lab.Datapath, err)
			}
		}
	}
	return nil
}

// errRefused is a refused connection: the probe listens on every port it
// tries, so only a datapath that refuses denied connects (the eBPF
// connect hook) should cause one.
var errRefused = errors.New("connection refused")

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// classify keeps timeouts silent (dropped by policy) and reports the rest.
func classify(err error) error {
	if isTimeout(err) {
		return nil
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return errRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return errors.New("unreachable")
	}
	return err
}

// servers are the probe's own listeners.
type servers struct {
	mu      sync.Mutex
	closers []func()
	wg      sync.WaitGroup
}

func (s *servers) listen(ep *topology.Endpoint, ip netip.Addr, t Target) error {
	addr := netip.AddrPortFrom(ip, uint16(t.Port)).String()
	if t.Protocol == "tcp" {
		return s.serveTCP(ep, "tcp", addr, func(c net.Conn) { c.Close() })
	}
	return s.serveUDP(ep, "udp", addr, func(pc net.PacketConn, msg []byte, from net.Addr) {
		_, _ = pc.WriteTo(msg, from)
	})
}

// serveTCP listens on addr inside ep's namespace for the probe's duration
// and hands every accepted connection to handle.
func (s *servers) serveTCP(ep *topology.Endpoint, network, addr string, handle func(net.Conn)) error {
	var ln net.Listener
	err := netns.Do(ep.Netns, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("listen on tcp %s in %s: %w (is something else using the port?)", addr, ep.ID(), err)
	}
	s.add(func() { ln.Close() })
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	return nil
}

// serveUDP listens on addr inside ep's namespace for the probe's duration
// and hands every datagram to handle.
func (s *servers) serveUDP(ep *topology.Endpoint, network, addr string, handle func(pc net.PacketConn, msg []byte, from net.Addr)) error {
	var pc net.PacketConn
	err := netns.Do(ep.Netns, func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("listen on udp %s in %s: %w (is something else using the port?)", addr, ep.ID(), err)
	}
	// Room for every prober's datagrams at once (three tries from each
	// endpoint of a full matrix): a datagram lost here reads as denied.
	if rc, err := pc.(*net.UDPConn).SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) })
	}
	s.add(func() { pc.Close() })
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			handle(pc, buf[:n], from)
		}
	}()
	return nil
}

func (s *servers) add(f func()) {
	s.mu.Lock()
	s.closers = append(s.closers, f)
	s.mu.Unlock()
}

func (s *servers) close() {
	for _, f := range s.closers {
		f()
	}
	s.wg.Wait()
}
