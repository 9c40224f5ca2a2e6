package nflog

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	vnl "github.com/vishvananda/netlink"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const testGroup = 7421

// testNetns creates the namespace cnlab-test-nflog-NAME with lo up and a
// veth pair v1 (10.0.0.1/24, routes 10.96.0.0/12 too) and v2 (no
// address: what it receives for 10.0.0.2 is dropped, after v1's OUTPUT and
// POSTROUTING hooks saw it), and deletes it when the test ends.
func testNetns(t *testing.T, name string) (ns, path string) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables", "iptables")
	ns = "cnlab-test-nflog-" + name
	_ = netns.Delete(ns) // a leftover of a killed run
	err := netns.Create(ns, func() error {
		lo, err := vnl.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := vnl.LinkSetUp(lo); err != nil {
			return err
		}
		d := &vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: "v1"}, PeerName: "v2"}
		if err := vnl.LinkAdd(d); err != nil {
			return err
		}
		addr, _ := vnl.ParseAddr("10.0.0.1/24")
		if err := vnl.AddrAdd(d, addr); err != nil {
			return err
		}
		peer, err := vnl.LinkByName("v2")
		if err != nil {
			return err
		}
		for _, l := range []vnl.Link{d, peer} {
			if err := vnl.LinkSetUp(l); err != nil {
				return err
			}
		}
		// 10.0.0.2 answers no ARP: a permanent entry sends its packets on.
		if err := vnl.NeighAdd(&vnl.Neigh{LinkIndex: d.Attrs().Index, State: vnl.NUD_PERMANENT,
			IP: net.IPv4(10, 0, 0, 2), HardwareAddr: peer.Attrs().HardwareAddr}); err != nil {
			return err
		}
		_, svc, _ := net.ParseCIDR("10.96.0.0/12")
		return vnl.RouteAdd(&vnl.Route{LinkIndex: d.Attrs().Index, Dst: svc})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Delete(ns); err != nil {
			t.Error(err)
		}
	})
	return ns, netns.Path(ns)
}

func run(t *testing.T, ns string, args ...string) {
	t.Helper()
	if _, err := netns.Run(context.Background(), ns, nil, args[0], args[1:]...); err != nil {
		t.Fatal(err)
	}
}

// collector gathers what a listener delivers.
type collector struct {
	mu      sync.Mutex
	pkts    []Packet
	trans   []Translation
	lost    uint64
	unknown int // lost(0) calls
}

func (c *collector) packet(p Packet) { c.mu.Lock(); c.pkts = append(c.pkts, p); c.mu.Unlock() }
func (c *collector) translation(t Translation) {
	c.mu.Lock()
	c.trans = append(c.trans, t)
	c.mu.Unlock()
}
func (c *collector) lose(n uint64) {
	c.mu.Lock()
	c.lost += n
	if n == 0 {
		c.unknown++
	}
	c.mu.Unlock()
}
func (c *collector) counts() (delivered int, lost uint64, unknown int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pkts) + len(c.trans), c.lost, c.unknown
}

// waitFor polls until cond holds or the timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// start runs a listener in the background once ready; stop cancels it
// and returns its error.
func start(t *testing.T, listen func(ctx context.Context, ready func()) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- listen(ctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		t.Fatalf("listener ended before ready: %v", err)
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(2 * time.Second):
				err = fmt.Errorf("listener did not return within 2 s of its context's end")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// udpSender returns a UDP socket inside ns connected to dst.
func udpSender(t *testing.T, ns string, dst string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := netns.Do(ns, func() error {
		raddr, err := net.ResolveUDPAddr("udp", dst)
		if err != nil {
			return err
		}
		c, err = net.DialUDP("udp", nil, raddr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// groupBound reports whether /proc/net/netfilter/nfnetlink_log of ns
// lists the group.
func groupBound(t *testing.T, ns string, group uint16) bool {
	t.Helper()
	out, err := netns.Run(context.Background(), ns, nil, "cat", "/proc/net/netfilter/nfnetlink_log")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == fmt.Sprint(group) {
			return true
		}
	}
	return false
}

func TestListen(t *testing.T) {
	ns, path := testNetns(t, "listen")
	g := fmt.Sprint(testGroup)
	run(t, ns, "iptables", "-A", "OUTPUT", "-o", "v1", "-p", "udp", "--dport", "9999",
		"-j", "NFLOG", "--nflog-group", g, "--nflog-prefix", "cnlab D I 0123abcd")
	run(t, ns, "iptables", "-A", "OUTPUT", "-o", "lo", "-p", "tcp", "--syn", "--dport", "9998",
		"-j", "NFLOG", "--nflog-group", g, "--nflog-prefix", "cnlab F E -")

	var c collector
	stop := start(t, func(ctx context.Context, ready func()) error {
		return Listen(ctx, path, testGroup, ready, c.packet, c.lose)
	})
	if !groupBound(t, ns, testGroup) {
		t.Fatalf("group %d not listed in nfnetlink_log once ready", testGroup)
	}

	// One UDP datagram first, to time its delivery.
	udp := udpSender(t, ns, "10.0.0.2:9999")
	sent := time.Now()
	if _, err := udp.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Second, func() bool { n, _, _ := c.counts(); return n == 1 }) {
		t.Fatal("the first packet did not arrive within 1 s")
	}
	t.Logf("first packet delivered %v after its send", time.Since(sent).Round(time.Millisecond))
	const udpN, tcpN = 20, 3
	for i := 1; i < udpN; i++ {
		if _, err := udp.Write(make([]byte, i)); err != nil {
			t.Fatal(err)
		}
	}
	// Connections refused by a closed port on lo: one SYN each.
	var tcpSrc []netip.AddrPort
	for i := 0; i < tcpN; i++ {
		err := netns.Do(ns, func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}, Timeout: time.Second}
			// Refused: nothing listens. The port is taken from the RST.
			c, err := d.Dial("tcp", "127.0.0.2:9998")
			if err == nil {
				c.Close()
				return fmt.Errorf("connect to a closed port succeeded")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(2*time.Second, func() bool { n, _, _ := c.counts(); return n >= udpN+tcpN }) {
		n, _, _ := c.counts()
		t.Fatalf("got %d packets, want %d", n, udpN+tcpN)
	}
	time.Sleep(100 * time.Millisecond) // let extra packets, if any, show up
	if err := stop(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	if groupBound(t, ns, testGroup) {
		t.Errorf("group %d still listed in nfnetlink_log after Listen returned", testGroup)
	}

	delivered, lost, _ := c.counts()
	if delivered != udpN+tcpN || lost != 0 {
		t.Errorf("delivered %d, lost %d; want %d, 0", delivered, lost, udpN+tcpN)
	}
	local := udp.LocalAddr().(*net.UDPAddr).AddrPort()
	var udps, tcps int
	for i, p := range c.pkts {
		if p.Time.IsZero() || time.Since(p.Time) > time.Minute {
			t.Errorf("packet %d: time %v", i, p.Time)
		}
		switch p.Proto {
		case 17:
			want := Packet{Prefix: "cnlab D I 0123abcd", Src: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), local.Port()),
				Dst: netip.MustParseAddrPort("10.0.0.2:9999"), Proto: 17, Len: 20 + 8 + max(udps, 1), OutDev: "v1"}
			want.Time = p.Time
			if p != want {
				t.Errorf("UDP packet %d:\n got %+v\nwant %+v", udps, p, want)
			}
			udps++
		case 6:
			tcpSrc = append(tcpSrc, p.Src)
			if p.Prefix != "cnlab F E -" || p.Src.Addr() != netip.MustParseAddr("127.0.0.3") || p.Src.Port() == 0 ||
				p.Dst != netip.MustParseAddrPort("127.0.0.2:9998") || p.TCPFlags != 0x02 || p.OutDev != "lo" || p.InDev != "" || p.Len < 40 {
				t.Errorf("TCP packet: %+v, want a SYN 127.0.0.3:* -> 127.0.0.2:9998 out of lo, prefix %q", p, "cnlab F E -")
			}
			tcps++
		default:
			t.Errorf("unexpected packet %+v", p)
		}
	}
	if udps != udpN || tcps != tcpN {
		t.Errorf("got %d UDP and %d TCP packets, want %d and %d", udps, tcps, udpN, tcpN)
	}
}

func TestListenBusyGroup(t *testing.T) {
	_, path := testNetns(t, "busy")
	stop := start(t, func(ctx context.Context, ready func()) error {
		return Listen(ctx, path, testGroup, ready, nil, nil)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := Listen(ctx, path, testGroup, nil, nil, nil); err == nil {
		t.Error("a second Listen on a bound group succeeded")
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

func TestLost(t *testing.T) {
	ns, path := testNetns(t, "lost")
	run(t, ns, "iptables", "-A", "OUTPUT", "-o", "v1", "-p", "udp", "--dport", "9999",
		"-j", "NFLOG", "--nflog-group", fmt.Sprint(testGroup), "--nflog-prefix", "cnlab D E -")
	defer func(n int) { rcvBuf = n }(rcvBuf)
	rcvBuf = 16 << 10

	// The reader stalls on the first packet until the burst is sent, so
	// the socket overflows.
	var c collector
	release := make(chan struct{})
	var once sync.Once
	stop := start(t, func(ctx context.Context, ready func()) error {
		return Listen(ctx, path, testGroup, ready, func(p Packet) {
			once.Do(func() { <-release })
			c.packet(p)
		}, c.lose)
	})
	udp := udpSender(t, ns, "10.0.0.2:9999")
	const burst = 2000
	for i := 0; i < burst; i++ {
		if _, err := udp.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	// Drain, then one more packet so the last gap is counted.
	time.Sleep(200 * time.Millisecond)
	if _, err := udp.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	sent := burst + 1
	ok := waitFor(2*time.Second, func() bool { d, l, _ := c.counts(); return d+int(l) >= sent })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	delivered, lost, unknown := c.counts()
	t.Logf("sent %d, delivered %d, lost %d (ENOBUFS reported %d times), receive buffer %d B", sent, delivered, lost, unknown, rcvBuf)
	if !ok || delivered+int(lost) != sent {
		t.Errorf("delivered %d + lost %d != sent %d", delivered, lost, sent)
	}
	if lost == 0 || unknown == 0 {
		t.Errorf("lost %d, ENOBUFS %d times: the %d B buffer should have overflowed", lost, unknown, rcvBuf)
	}
}

func TestListenConntrack(t *testing.T) {
	ns, path := testNetns(t, "ct")
	// A Service frontend DNATed to a local backend, and one DNATed to a
	// remote backend through a masquerading link.
	run(t, ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "10.96.0.10", "-p", "tcp", "--dport", "80",
		"-j", "DNAT", "--to-destination", "10.0.0.1:8080")
	run(t, ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", "10.96.0.11", "-p", "udp", "--dport", "53",
		"-j", "DNAT", "--to-destination", "10.0.0.2:5353")
	run(t, ns, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "v1", "-p", "udp",
		"-j", "SNAT", "--to-source", "10.0.0.9")
	echo, err := testutil.ListenEcho(ns, netip.MustParseAddrPort("10.0.0.1:8080"))
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()

	var c collector
	stop := start(t, func(ctx context.Context, ready func()) error {
		return ListenConntrack(ctx, path, ready, c.translation, c.lose)
	})
	// Traffic without translation is not reported.
	if err := testutil.ExchangeTCP(context.Background(), ns, netip.MustParseAddrPort("10.0.0.1:8080"), 10); err != nil {
		t.Fatal(err)
	}
	if err := testutil.ExchangeTCP(context.Background(), ns, netip.MustParseAddrPort("10.96.0.10:80"), 10); err != nil {
		t.Fatal(err)
	}
	udp := udpSender(t, ns, "10.96.0.11:53")
	if _, err := udp.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	waitFor(2*time.Second, func() bool { n, _, _ := c.counts(); return n >= 2 })
	time.Sleep(100 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(c.trans) != 2 {
		t.Fatalf("got %d translations, want 2: %+v", len(c.trans), c.trans)
	}
	tcp, u := c.trans[0], c.trans[1]
	if tcp.Proto != 6 || tcp.Src.Addr() != netip.MustParseAddr("10.0.0.1") || tcp.Frontend != netip.MustParseAddrPort("10.96.0.10:80") ||
		tcp.Backend != netip.MustParseAddrPort("10.0.0.1:8080") || tcp.SNAT.IsValid() || tcp.Time.IsZero() {
		t.Errorf("TCP translation %+v, want 10.0.0.1:* -> 10.96.0.10:80 -> 10.0.0.1:8080, no SNAT", tcp)
	}
	local := udp.LocalAddr().(*net.UDPAddr).AddrPort()
	if u.Proto != 17 || u.Src != netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), local.Port()) ||
		u.Frontend != netip.MustParseAddrPort("10.96.0.11:53") || u.Backend != netip.MustParseAddrPort("10.0.0.2:5353") ||
		u.SNAT.Addr() != netip.MustParseAddr("10.0.0.9") {
		t.Errorf("UDP translation %+v, want %v -> 10.96.0.11:53 -> 10.0.0.2:5353, SNAT 10.0.0.9", u, local)
	}
}

// TestRate measures the NFLOG path: UDP datagrams sent by a paced loop in
// the namespace (rate 0: as fast as one socket sends), each logged by an
// iptables rule, counted against what Listen delivers and reports lost.
// It runs with the rule's default queue threshold (the listener's, 64)
// and with --nflog-threshold 1 (one netlink message per packet, the
// kernel's costliest case). It fails only if the counts do not add up;
// the figures are in the log (go test -v -run TestRate).
func TestRate(t *testing.T) {
	for _, thresh := range []string{"", "1"} {
		t.Run("threshold="+thresh, func(t *testing.T) { testRate(t, thresh) })
	}
}

func testRate(t *testing.T, thresh string) {
	ns, path := testNetns(t, "rate")
	rule := []string{"iptables", "-A", "OUTPUT", "-o", "v1", "-p", "udp", "--dport", "9999",
		"-j", "NFLOG", "--nflog-group", fmt.Sprint(testGroup), "--nflog-prefix", "cnlab F E 0123abcd"}
	if thresh != "" {
		rule = append(rule, "--nflog-threshold", thresh)
	}
	run(t, ns, rule...)
	var c collector
	var delivered atomic.Int64
	stop := start(t, func(ctx context.Context, ready func()) error {
		return Listen(ctx, path, testGroup, ready, func(Packet) { delivered.Add(1) }, c.lose)
	})
	counts := func() (int, uint64) { _, l, _ := c.counts(); return int(delivered.Load()), l }
	udp := udpSender(t, ns, "10.0.0.2:9999")
	total := 0
	for _, rate := range []int{10000, 20000, 50000, 0} {
		before, lostBefore := counts()
		sent := sendPaced(t, udp, rate, time.Second)
		if _, err := udp.Write([]byte("end")); err != nil { // closes a trailing gap
			t.Fatal(err)
		}
		sent++
		total += sent
		ok := waitFor(3*time.Second, func() bool { d, l := counts(); return d+int(l) >= total })
		d, l := counts()
		t.Logf("%5d packets/s for 1 s: sent %6d, delivered %6d, lost %d", rate, sent, d-before, l-lostBefore)
		if !ok || d+int(l) != total {
			t.Errorf("delivered %d + lost %d != sent %d", d, l, total)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// sendPaced sends 1-byte datagrams at rate per second (0: as fast as it
// can) for d, in bursts every half millisecond, and returns how many it sent.
func sendPaced(t *testing.T, c *net.UDPConn, rate int, d time.Duration) int {
	t.Helper()
	start := time.Now()
	sent := 0
	for el := time.Duration(0); el < d; el = time.Since(start) {
		due := int(float64(rate) * el.Seconds())
		if rate == 0 {
			due = sent + 1000
		}
		for ; sent < due; sent++ {
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if rate != 0 {
			time.Sleep(500 * time.Microsecond)
		}
	}
	return sent
}
