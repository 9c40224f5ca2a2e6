package l7proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/l7"
)

// DeniedBody is what the proxy answers, with 403, to a request the rules
// do not allow: Cilium's proxy answers the same.
const DeniedBody = "Access denied\r\n"

// Files of a proxy's directory.
const (
	ConfigFile = "config.json" // the configuration the proxy reloads
	ctlSocket  = "ctl.sock"
	accessLog  = "access.log"
	PidFile    = "pid"       // the proxy's pid, written by whoever starts it
	LogFile    = "proxy.log" // the proxy's own output
)

// Stats are a proxy's counters since it started.
type Stats struct {
	Pid         int            `json:"pid"`
	Connections uint64         `json:"connections"`
	Requests    uint64         `json:"requests"`
	Allowed     uint64         `json:"allowed"`
	Denied      uint64         `json:"denied"`
	Upstream    uint64         `json:"upstreamErrors"` // allowed, but the server could not be reached
	Dropped     uint64         `json:"logDropped"`     // access log lines dropped under load
	Refused     uint64         `json:"refused"`        // connections closed at once: MaxConnections open
	Open        int64          `json:"open"`           // client connections open now
	Set         string         `json:"set"`
	ByStatus    map[int]uint64 `json:"byStatus"`
}

// LogEntry is one line of the access log (JSON).
type LogEntry struct {
	Time     time.Time `json:"time"`
	Src      string    `json:"src"`
	Dst      string    `json:"dst"`
	Identity uint32    `json:"identity"`
	Method   string    `json:"method"`
	Path     string    `json:"path"`
	Host     string    `json:"host"`
	Verdict  string    `json:"verdict"` // allowed, denied, upstream-error
	Status   int       `json:"status"`
	Micros   int64     `json:"us"`
}

// portPolicy is a PortConfig compiled.
type portPolicy struct {
	byID   map[uint32]*l7.Matcher
	byAddr map[netip.Addr]*l7.Matcher // endpoints whose rules differ from their identity's
	cidrs  []PeerConfig
	cache  sync.Map // netip.Addr -> *l7.Matcher, for sources that are no endpoint
	cached atomic.Int64
}

// compiled is a Config ready to judge requests.
type compiled struct {
	set   string
	ids   map[netip.Addr]uint32
	ports map[netip.AddrPort]*portPolicy
	// seen are the destinations every configuration since the proxy
	// started made L7 ports: a connection to one that is no longer an L7
	// port is judged at L3/L4 by l4 (it was opened while it was); to any
	// other, nothing passes.
	seen map[netip.AddrPort]bool
	l4   *L4Policy
	lim  Limits
}

func compile(cfg *Config) (*compiled, error) {
	c := &compiled{set: cfg.Set, ids: cfg.Identities, ports: map[netip.AddrPort]*portPolicy{}, seen: map[netip.AddrPort]bool{}, l4: cfg.L4, lim: cfg.Limits.WithDefaults()}
	for _, pc := range cfg.Ports {
		pp := &portPolicy{byID: map[uint32]*l7.Matcher{}, byAddr: map[netip.Addr]*l7.Matcher{}}
		for _, peer := range pc.Peers {
			if peer.CIDR.IsValid() {
				pp.cidrs = append(pp.cidrs, peer)
				continue
			}
			m, err := l7.Compile(peer.Rules)
			if err != nil {
				return nil, fmt.Errorf("%s port %d, identity %d: %w", pc.Endpoint, pc.Port, peer.Identity, err)
			}
			if peer.Addr.IsValid() {
				pp.byAddr[peer.Addr] = m
			} else {
				pp.byID[peer.Identity] = m
			}
		}
		k := netip.AddrPortFrom(pc.Addr, pc.Port)
		c.ports[k], c.seen[k] = pp, true
	}
	return c, nil
}

// matcher returns the rules a source gets on the port: its identity's,
// or for an address that is no endpoint's, the union of the CIDR peers
// that cover it.
func (pp *portPolicy) matcher(src netip.Addr, id uint32, known bool) *l7.Matcher {
	if m, ok := pp.byAddr[src]; ok {
		return m
	}
	if known {
		return pp.byID[id]
	}
	if m, ok := pp.cache.Load(src); ok {
		return m.(*l7.Matcher)
	}
	var rules []l7.Rule
	for _, p := range pp.cidrs {
		if p.CIDR.Contains(src) {
			rules = append(rules, p.Rules...)
		}
	}
	m, err := l7.Compile(rules)
	if err != nil {
		m, _ = l7.Compile(nil)
	}
	if pp.cached.Add(1) <= maxCached { // bounded: sources are many when ingress is open
		pp.cache.Store(src, m)
	}
	return m
}

// maxCached bounds the matchers a port keeps for sources that are no
// endpoint.
const maxCached = 4096

// Proxy is a running proxy.
type Proxy struct {
	dir   string
	cur   atomic.Pointer[compiled]
	mu    sync.Mutex // guards stats and reloads
	stats Stats
	// logMu guards the access log's entries not yet written: appended on
	// the request's goroutine, written by writeLog a few times a second
	// (no hand-off per request).
	logMu   sync.Mutex
	pending []LogEntry
	pool    upPool
	open    atomic.Int64 // client connections open
	// forwarding, when set (by tests), is called with each request the
	// proxy forwards, as it was judged.
	forwarding func(l7.Request)
	// ownsProcess: the process is the proxy's (Run), whose threads
	// Limits.Threads sets (not a test's).
	ownsProcess bool
}

// maxPending bounds the access log entries waiting to be written: beyond
// it they are dropped (and counted).
const maxPending = 1 << 16

// connInfo is what the proxy knows of a client connection.
type connInfo struct {
	src, dst netip.AddrPort
	err      error
	// l4For and l4OK cache the L3/L4 verdict of the connection under one
	// configuration (requests of a connection are served one at a time).
	l4For *compiled
	l4OK  bool
}

// allowsL4 reports whether the configuration c allows the connection at
// L3/L4 (for a port that is no longer an L7 port).
func (ci *connInfo) allowsL4(c *compiled) bool {
	if ci.l4For != c {
		ci.l4For, ci.l4OK = c, c.l4.Allows(c.ids, ci.src, ci.dst)
	}
	return ci.l4OK
}

func newProxy(dir string) *Proxy {
	return &Proxy{dir: dir, stats: Stats{Pid: os.Getpid(), ByStatus: map[int]uint64{}}}
}

// limits are the limits of the configuration in force.
func (p *Proxy) limits() Limits {
	if c := p.cur.Load(); c != nil {
		return c.lim
	}
	return DefaultLimits
}

// Run runs a proxy from its directory (config, control socket, access
// log) until ctx ends. listen is the IPv4 address it accepts redirected
// connections on; it accepts IPv6 ones on the same port of [::] too
// (when the host has IPv6 at all).
func Run(ctx context.Context, dir, listen string) error {
	p := newProxy(dir)
	p.ownsProcess = true
	runtime.GOMAXPROCS(DefaultLimits.Threads) // until a configuration says otherwise
	if err := p.reload(false); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// IP_TRANSPARENT (IPV6_TRANSPARENT): connections assigned by eBPF
	// (sk_assign) keep their original destination as local address.
	lc := net.ListenConfig{Control: sockopts(true)}
	ln, err := lc.Listen(ctx, "tcp4", listen)
	if err != nil {
		return fmt.Errorf("l7 proxy: listen %s: %w", listen, err)
	}
	lns := []net.Listener{ln}
	// IPv6 on a listener of its own (IPV6_V6ONLY, as Go sets it for
	// "tcp6"): IPv4 connections keep the listener they always had.
	_, port, _ := net.SplitHostPort(listen)
	if ln6, err := lc.Listen(ctx, "tcp6", net.JoinHostPort("::", port)); err == nil {
		lns = append(lns, ln6)
	} else if !errors.Is(err, syscall.EAFNOSUPPORT) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		ln.Close()
		return fmt.Errorf("l7 proxy: listen [::]:%s: %w", port, err)
	}
	return serve(ctx, p, lns, connOf)
}

// sockopts sets the proxy's mark (and IP_TRANSPARENT, or
// IPV6_TRANSPARENT on an IPv6 socket) on a socket before it binds or
// connects.
func sockopts(transparent bool) func(network, _ string, rc syscall.RawConn) error {
	return func(network, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, Mark)
			if serr == nil && transparent {
				if strings.HasSuffix(network, "6") {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
				} else {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_TRANSPARENT, 1)
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// serve runs the proxy on its listeners (IPv4's, and IPv6's); conn tells
// a connection's source and original destination (connOf; tests give
// their own).
func serve(ctx context.Context, p *Proxy, lns []net.Listener, conn func(net.Conn) *connInfo) error {
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	ctl := filepath.Join(p.dir, ctlSocket)
	_ = os.Remove(ctl)
	cl, err := net.Listen("unix", ctl)
	if err != nil {
		closeAll()
		return fmt.Errorf("l7 proxy: control socket: %w", err)
	}
	var bg, conns sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	bg.Add(2)
	go func() { defer bg.Done(); p.writeLog(ctx) }()
	go func() { defer bg.Done(); p.control(ctx, cl) }()
	stop := context.AfterFunc(ctx, func() {
		cl.Close()
		closeAll()
	})
	defer stop()
	// Each listener has its accept loop; the first to fail (or to be
	// closed as ctx ends) ends them all.
	accept := func(ln net.Listener) error {
		for {
			c, err := ln.Accept()
			if err != nil {
				var ne net.Error
				if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				return err
			}
			p.mu.Lock()
			p.stats.Connections++
			p.mu.Unlock()
			if n := p.open.Add(1); n > int64(p.limits().MaxConnections) {
				p.open.Add(-1)
				p.mu.Lock()
				p.stats.Refused++
				p.mu.Unlock()
				c.Close()
				continue
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				p.serveConn(c, conn(c))
				p.open.Add(-1)
				mu.Lock()
				delete(open, c)
				mu.Unlock()
			}()
		}
	}
	errs := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { errs <- accept(ln) }()
	}
	err = <-errs // the first loop to end, whichever family's
	closeAll()
	cl.Close()
	for range lns[1:] {
		<-errs
	}
	// Connections still open end within a second.
	t := time.AfterFunc(time.Second, func() {
		mu.Lock()
		defer mu.Unlock()
		for c := range open {
			c.Close()
		}
	})
	conns.Wait()
	t.Stop()
	p.pool.closeAll()
	if ctx.Err() != nil {
		bg.Wait()
		return nil
	}
	return fmt.Errorf("l7 proxy: accept: %w", err)
}

// connOf finds a client connection's source and original destination:
// the destination before REDIRECT (SO_ORIGINAL_DST) when the connection
// arrived on the proxy's own port, else its local address (eBPF's
// sk_assign keeps the original destination).
func connOf(c net.Conn) *connInfo {
	ci := &connInfo{}
	ra, _ := c.RemoteAddr().(*net.TCPAddr)
	la, _ := c.LocalAddr().(*net.TCPAddr)
	if ra == nil || la == nil {
		ci.err = errors.New("not a TCP connection")
		return ci
	}
	ci.src = netip.AddrPortFrom(addr4(ra.IP), uint16(ra.Port))
	ci.dst = netip.AddrPortFrom(addr4(la.IP), uint16(la.Port))
	if la.Port == Port {
		if tc, ok := c.(*net.TCPConn); ok {
			if od, err := originalDst(tc, ci.dst.Addr().Is6()); err == nil {
				ci.dst = od
			} else {
				ci.err = err
			}
		}
	}
	return ci
}

func addr4(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// soOriginalDst is SO_ORIGINAL_DST of <linux/netfilter_ipv4.h> (at
// SOL_IP), and IP6T_SO_ORIGINAL_DST of <linux/netfilter_ipv6/ip6_tables.h>
// (the same number, at SOL_IPV6); neither is in x/sys.
const soOriginalDst = 80

// originalDst reads the destination a connection (IPv6 when v6) had
// before nat REDIRECT changed it.
func originalDst(c *net.TCPConn, v6 bool) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa syscall.RawSockaddrInet4
	var sa6 syscall.RawSockaddrInet6
	level, ptr, size := syscall.SOL_IP, unsafe.Pointer(&sa), unsafe.Sizeof(sa)
	if v6 {
		level, ptr, size = syscall.SOL_IPV6, unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		l := uint32(size)
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
			uintptr(ptr), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 {
			serr = e
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		if v6 {
			return netip.AddrPort{}, fmt.Errorf("IP6T_SO_ORIGINAL_DST: %w", err)
		}
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", err)
	}
	if v6 {
		port := (*[2]byte)(unsafe.Pointer(&sa6.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa6.Addr), uint16(port[0])<<8|uint16(port[1])), nil
	}
	port := (*[2]byte)(unsafe.Pointer(&sa.Port))
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(port[0])<<8|uint16(port[1])), nil
}

// target returns the request-target as Envoy's :path (an absolute-form
// target, http://host/path?q, by its path and query), and false when the
// request cannot be forwarded as judged: an absolute-form target without
// "://", or whose authority (the Host judged) the transport would send
// altered (punycode) or empty, being no valid Host header (the server
// checked the Host header of an origin-form request, not this one).
func target(r *http.Request) (string, bool) {
	path := r.RequestURI
	if r.URL.IsAbs() {
		i := strings.Index(path, "://")
		if h, err := httpguts.PunycodeHostPort(r.Host); i < 0 || err != nil || h != r.Host || !httpguts.ValidHostHeader(h) {
			return path, false
		}
		rest := path[i+3:]
		switch j := strings.IndexAny(rest, "/?"); {
		case j < 0:
			path = "/"
		case rest[j] == '?':
			path = "/" + rest[j:]
		default:
			path = rest[j:]
		}
	}
	return path, true
}

// done counts and logs a request's entry.
func (p *Proxy) done(e LogEntry, start time.Time) {
	e.Micros = time.Since(start).Microseconds()
	p.count(e)
	p.logMu.Lock()
	kept := len(p.pending) < maxPending
	if kept {
		p.pending = append(p.pending, e)
	}
	p.logMu.Unlock()
	if !kept {
		p.mu.Lock()
		p.stats.Dropped++
		p.mu.Unlock()
	}
}

func (p *Proxy) count(e LogEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Requests++
	switch e.Verdict {
	case "closed": // no answer: no status
		p.stats.Denied++
		return
	case "denied":
		p.stats.Denied++
	case "upstream-error":
		p.stats.Upstream++
	default:
		p.stats.Allowed++
	}
	p.stats.ByStatus[e.Status]++
}

// writeLog appends the access log a few times a second, and closes the
// upstream connections idle for too long.
func (p *Proxy) writeLog(ctx context.Context) {
	var enc *json.Encoder
	var bw *bufio.Writer
	f, err := os.OpenFile(filepath.Join(p.dir, accessLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		defer f.Close()
		bw = bufio.NewWriterSize(f, 64<<10)
		enc = json.NewEncoder(bw)
	}
	var batch []LogEntry
	write := func() {
		p.logMu.Lock()
		batch, p.pending = p.pending, batch[:0]
		p.logMu.Unlock()
		if enc == nil {
			return
		}
		for _, e := range batch {
			_ = enc.Encode(e)
		}
		_ = bw.Flush()
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-tick.C:
			write()
			if n%50 == 0 {
				p.pool.sweep()
			}
		case <-ctx.Done():
			write()
			return
		}
	}
}

// reload reads the configuration file and swaps it in at once: a request
// is judged entirely by the old or entirely by the new rules. With keep,
// the ports of the old configuration that the new one lacks keep their
// old rules.
func (p *Proxy) reload(keep bool) error {
	var cfg Config
	data, err := os.ReadFile(filepath.Join(p.dir, ConfigFile))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("%s: %w", ConfigFile, err)
	}
	c, err := compile(&cfg)
	if err != nil {
		return err
	}
	if old := p.cur.Load(); keep && old != nil {
		for k, pp := range old.ports {
			if _, ok := c.ports[k]; !ok {
				c.ports[k] = pp
			}
		}
		// The kept ports judge sources by the identities they were
		// written for.
		if c.ids == nil {
			c.ids = map[netip.Addr]uint32{}
		}
		for ip, id := range old.ids {
			if _, ok := c.ids[ip]; !ok {
				c.ids[ip] = id
			}
		}
	}
	if old := p.cur.Load(); old != nil {
		for k := range old.seen {
			c.seen[k] = true
		}
	}
	p.cur.Store(c)
	if n := c.lim.Threads; p.ownsProcess && n != runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
	}
	p.mu.Lock()
	p.stats.Set = c.set
	p.mu.Unlock()
	return nil
}

// control answers the control socket: "reload" (swap the configuration
// in, answer "ok SET" once it judges requests) and "stats" (the counters
// as JSON), one command per line.
func (p *Proxy) control(ctx context.Context, l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				switch sc.Text() {
				case "reload", "reload keep":
					if err := p.reload(sc.Text() == "reload keep"); err != nil {
						fmt.Fprintf(c, "error %v\n", err)
						continue
					}
					fmt.Fprintf(c, "ok %s\n", p.cur.Load().set)
				case "stats":
					p.mu.Lock()
					p.stats.Open = p.open.Load()
					data, _ := json.Marshal(p.stats)
					p.mu.Unlock()
					fmt.Fprintf(c, "%s\n", data)
				case "ping":
					fmt.Fprintln(c, "pong")
				default:
					fmt.Fprintf(c, "error unknown command %q\n", sc.Text())
				}
			}
		}()
	}
}
