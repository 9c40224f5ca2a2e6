package registry_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/proxy"
	ebpfproxy "github.com/cnlab/cnlab/proxy/ebpf"
	"github.com/cnlab/cnlab/proxy/registry"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// labYAML: backends a and b on flip, c on flap; clients d on flip and e
// on flap.
const labYAML = `name: px
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wire}
namespaces:
  x: {labels: {ns: x}}
endpoints:
  - {name: a, namespace: x, host: flip, ip: 10.0.192.10}
  - {name: b, namespace: x, host: flip, ip: 10.0.192.11}
  - {name: c, namespace: x, host: flap, ip: 10.0.191.12}
  - {name: d, namespace: x, host: flip, ip: 10.0.192.20}
  - {name: e, namespace: x, host: flap, ip: 10.0.191.21}
`

const (
	tcpPort = 8080
	udpPort = 5353
)

var (
	vipWeb   = netip.MustParseAddr("10.96.0.10")
	vipDNS   = netip.MustParseAddr("10.96.0.11")
	vipAff   = netip.MustParseAddr("10.96.0.12")
	vipEmpty = netip.MustParseAddr("10.96.0.13")
	vipLocal = netip.MustParseAddr("10.96.0.14")
	vipExtL  = netip.MustParseAddr("10.96.0.15")
	vipDeaf  = netip.MustParseAddr("10.96.0.16")
)

// svcLab brings a lab up with a datapath, link kind and service proxy,
// starts a named TCP and UDP server in every backend, and sets the proxy
// up.
func svcLab(t *testing.T, name, dp, link string, px kind.Proxy, extra ...string) (*topology.Spec, proxy.Proxy, map[string]*topology.Endpoint) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	yaml := strings.Replace(labYAML, "kind: wire", "kind: "+link, 1) + strings.Join(extra, "")
	spec, err := topology.Parse([]byte(yaml), "proxy test lab", topology.Overrides{Name: name, Datapath: dp, Proxy: string(px)})
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Up(context.Background(), spec, lab.UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(spec.Name, nil); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	eps := map[string]*topology.Endpoint{}
	for i := range spec.Endpoints {
		eps[spec.Endpoints[i].Name] = &spec.Endpoints[i]
	}
	for _, n := range []string{"a", "b", "c"} {
		stop, err := serve(eps[n])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop) // runs before Down
	}
	p, err := registry.New(px)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	return spec, p, eps
}

// serve answers every line a TCP client sends, and every UDP datagram,
// with the endpoint's name.
func serve(ep *topology.Endpoint) (func(), error) {
	var ln net.Listener
	var pc net.PacketConn
	err := netns.Do(ep.Netns, func() error {
		var err error
		if ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", ep.IP, tcpPort)); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp4", fmt.Sprintf("%s:%d", ep.IP, udpPort))
		return err
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					// The name, and the client's address as the backend sees it.
					if _, err := fmt.Fprintf(c, "%s %s\n", ep.Name, c.RemoteAddr().(*net.TCPAddr).IP); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(ep.Name), from)
		}
	}()
	return func() {
		ln.Close()
		pc.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}, nil
}

// conn is an open TCP connection from a client to a frontend.
type conn struct{ c net.Conn }

func dial(ep *topology.Endpoint, dst netip.AddrPort) (*conn, error) {
	var c net.Conn
	err := netns.Do(ep.Netns, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", dst.String(), 2*time.Second)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &conn{c}, nil
}

// ask sends a line and returns the name that answers.
func (c *conn) ask() (string, error) {
	name, _, err := c.askFrom()
	return name, err
}

// askFrom returns the name that answers and the client address it saw.
func (c *conn) askFrom() (name, src string, err error) {
	_ = c.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.c.Write([]byte("?\n")); err != nil {
		return "", "", err
	}
	line, err := bufio.NewReader(c.c).ReadString('\n')
	name, src, _ = strings.Cut(strings.TrimSpace(line), " ")
	return name, src, err
}

// askTCP opens a fresh connection, asks and closes it.
func askTCP(ep *topology.Endpoint, dst netip.AddrPort) (string, error) {
	name, _, err := askTCPFrom(ep, dst)
	return name, err
}

// askTCPFrom is askTCP that also returns the client address the backend
// saw.
func askTCPFrom(ep *topology.Endpoint, dst netip.AddrPort) (name, src string, err error) {
	c, err := dial(ep, dst)
	if err != nil {
		return "", "", err
	}
	defer c.c.Close()
	return c.askFrom()
}

// seen asks k fresh connections and returns the client addresses each
// backend saw.
func seen(t *testing.T, from *topology.Endpoint, dst netip.AddrPort, k int) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for i := 0; i < k; i++ {
		name, src, err := askTCPFrom(from, dst)
		if err != nil {
			t.Fatalf("%s -> %s: %v", from.ID(), dst, err)
		}
		if !contains(out[name], src) {
			out[name] = append(out[name], src)
		}
	}
	return out
}

// udpSock is a UDP socket of a client, not connected, so that where a
// reply comes from is seen.
type udpSock struct{ pc *net.UDPConn }

func udpOpen(ep *topology.Endpoint) (*udpSock, error) {
	var pc *net.UDPConn
	err := netns.Do(ep.Netns, func() error {
		var err error
		pc, err = net.ListenUDP("udp4", nil)
		return err
	})
	return &udpSock{pc}, err
}

// ask sends a datagram and returns the answer and its source.
func (u *udpSock) ask(dst netip.AddrPort) (string, netip.AddrPort, error) {
	buf := make([]byte, 64)
	for try := 0; try < 3; try++ {
		if _, err := u.pc.WriteToUDPAddrPort([]byte("?"), dst); err != nil {
			return "", netip.AddrPort{}, err
		}
		_ = u.pc.SetReadDeadline(time.Now().Add(time.Second))
		n, from, err := u.pc.ReadFromUDPAddrPort(buf)
		if err == nil {
			return string(buf[:n]), netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nil
		}
	}
	return "", netip.AddrPort{}, fmt.Errorf("no UDP answer from %s", dst)
}

// udpRefused sends a datagram from a connected UDP socket and expects the
// read to fail with ECONNREFUSED (an ICMP port unreachable seen by the
// socket), within two seconds.
func udpRefused(ep *topology.Endpoint, dst netip.AddrPort) error {
	var c net.Conn
	if err := netns.Do(ep.Netns, func() (err error) { c, err = net.Dial("udp4", dst.String()); return }); err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 64)
	for try := 0; try < 4; try++ {
		if _, err := c.Write([]byte("?")); err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				return nil
			}
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := c.Read(buf)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		if err == nil {
			return errors.New("answered, want connection refused")
		}
	}
	return errors.New("no connection refused in four tries (the port unreachable never reached the socket)")
}

// count asks k fresh connections (or sockets) and counts the answers.
func count(t *testing.T, from *topology.Endpoint, dst netip.AddrPort, udp bool, k int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := 0; i < k; i++ {
		var name string
		var err error
		if udp {
			var u *udpSock
			if u, err = udpOpen(from); err == nil {
				var src netip.AddrPort
				name, src, err = u.ask(dst)
				u.pc.Close()
				if err == nil && src != dst {
					t.Errorf("%s: UDP answer from %s, want the frontend %s", from.ID(), src, dst)
				}
			}
		} else {
			name, err = askTCP(from, dst)
		}
		if err != nil {
			t.Fatalf("%s -> %s: %v", from.ID(), dst, err)
		}
		got[name]++
	}
	return got
}

// expectSet fails unless exactly the names in want answered.
func expectSet(t *testing.T, what string, got map[string]int, want ...string) {
	t.Helper()
	for n := range got {
		if !contains(want, n) {
			t.Errorf("%s: %s answered (%v), want only %v", what, n, got, want)
		}
	}
	for _, n := range want {
		if got[n] == 0 {
			t.Errorf("%s: %s never answered (%v)", what, n, got)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func backend(ep *topology.Endpoint, port uint16) service.Backend {
	return service.Backend{Endpoint: ep.ID(), Host: ep.Host, IP: ep.IP, Port: port}
}

// table is the test's services: web (a, b, c), dns over UDP (a, c), aff
// with ClientIP affinity (a, b, c), empty, local (internalTrafficPolicy
// Local: a, c); dropWeb and dropDNS name a backend left out of web and
// dns.
func table(eps map[string]*topology.Endpoint, dropWeb, dropDNS string) *service.Table {
	var web, dns, all, local []service.Backend
	for _, n := range []string{"a", "b", "c"} {
		all = append(all, backend(eps[n], tcpPort))
		if n != "b" {
			local = append(local, backend(eps[n], tcpPort))
		}
		if n != dropWeb {
			web = append(web, backend(eps[n], tcpPort))
		}
		if n != "b" && n != dropDNS {
			dns = append(dns, backend(eps[n], udpPort))
		}
	}
	return &service.Table{Frontends: []service.Frontend{
		{Service: "x/aff", Protocol: "tcp", VIP: vipAff, Port: 80, Affinity: 60, Backends: all},
		{Service: "x/dns", Protocol: "udp", VIP: vipDNS, Port: 53, Backends: dns},
		{Service: "x/empty", Protocol: "tcp", VIP: vipEmpty, Port: 80},
		{Service: "x/local", Protocol: "tcp", VIP: vipLocal, Port: 80, InternalLocal: true, Backends: local},
		{Service: "x/web", Protocol: "tcp", VIP: vipWeb, Port: 80, NodePort: 30080, Backends: web},
		{Service: "x/webl", Protocol: "tcp", VIP: vipExtL, Port: 80, NodePort: 30081, ExternalLocal: true, Backends: all},
		// deaf: a UDP port nobody listens on, on a backend of another host.
		{Service: "x/deaf", Protocol: "udp", VIP: vipDeaf, Port: 53, Backends: []service.Backend{backend(eps["c"], 5999)}},
	}}
}

// kernelState is what an apply that changes nothing must leave alone:
// iptables-save with counters (a rewritten chain restarts its counters) or
// nft's listing with handles (a rewritten rule gets a new handle).
func kernelState(t *testing.T, spec *topology.Spec, px kind.Proxy) string {
	t.Helper()
	var b strings.Builder
	for _, h := range spec.Hosts {
		var out []byte
		var err error
		switch px { // each proxy's kernel state is read its own way
		case kind.ProxyEBPF:
			desc, derr := (ebpfproxy.New()).Describe(context.Background(), spec)
			out, err = []byte(desc[h.Name]), derr
		case kind.ProxyIPTables:
			_, save, _ := spec.IPTables.Tools()
			out, err = netns.Run(context.Background(), h.Netns, nil, save, "-c", "-t", "nat")
		default:
			out, err = netns.Run(context.Background(), h.Netns, nil, "nft", "-a", "list", "table", "ip", "cnlab-svc")
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Write(out)
	}
	// Timestamps and dynamic set elements change by themselves.
	return volatile.ReplaceAllString(b.String(), "")
}

var volatile = regexp.MustCompile(`(?m)^# .*$|elements = \{[^}]*\}|expires \S+`)

func TestProxies(t *testing.T) {
	type proxyCase struct {
		name, dp, link string
		px             kind.Proxy
		full           bool   // every check (else the multi-host basics)
		extra          string // appended to the topology
	}
	// From the registry: every proxy on its own datapath (the one whose
	// default it is) with every check, and on each other datapath it
	// pairs with (its own again if none) over VXLAN with the basics; then
	// the eBPF proxy with the options of its datapath, named because they
	// are options of that datapath alone.
	var cases []proxyCase
	for _, p := range kind.ServingProxies() {
		own := p.Home()
		cases = append(cases, proxyCase{"px" + string(p)[:3] + "-" + string(own)[:3], string(own), "wire", p, true, ""})
		others := 0
		for _, k := range p.Datapaths() {
			if k != own {
				others++
				cases = append(cases, proxyCase{"px" + string(p)[:3] + "-" + string(k)[:3] + "-vx", string(k), "vxlan", p, false, ""})
			}
		}
		if others == 0 {
			cases = append(cases, proxyCase{"px" + string(p)[:3] + "-vx", string(own), "vxlan", p, false, ""})
		}
	}
	cases = append(cases,
		proxyCase{"pxebpf-leg", "ebpf", "wire", kind.ProxyEBPF, true, "ebpf: {hostRouting: legacy}\n"},
		proxyCase{"pxebpf-sock", "ebpf", "wire", kind.ProxyEBPF, true, "ebpf: {socketLB: true}\n"},
		proxyCase{"pxebpf-sock-leg", "ebpf", "wire", kind.ProxyEBPF, true, "ebpf: {socketLB: true, hostRouting: legacy}\n"})
	// Nothing of the proxies ever lands in the root namespace.
	defer func() {
		for _, save := range []string{"iptables-legacy-save", "iptables-nft-save"} {
			if out, _ := exec.Command(save).Output(); strings.Contains(string(out), "CNLABSVC-REJECT") || strings.Contains(string(out), "CNLAB-SERVICES") || strings.Contains(string(out), "cnlab-svc") {
				t.Errorf("%s in the root namespace shows the proxy's chains:\n%s", save, out)
			}
		}
	}()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			spec, p, eps := svcLab(t, tc.name, tc.dp, tc.link, tc.px, tc.extra)
			ctx := context.Background()
			if err := p.Apply(ctx, spec, table(eps, "", "")); err != nil {
				t.Fatal(err)
			}
			web := netip.AddrPortFrom(vipWeb, 80)
			dns := netip.AddrPortFrom(vipDNS, 53)
			d, e := eps["d"], eps["e"]
			// Only the listed backends answer, and every one does.
			for _, c := range []*topology.Endpoint{d, e} {
				expectSet(t, c.ID()+" web", count(t, c, web, false, 40), "a", "b", "c")
				expectSet(t, c.ID()+" dns", count(t, c, dns, true, 25), "a", "c")
			}
			if !tc.full {
				t.Logf("%s: %v", tc.name, time.Since(start))
				return
			}
			// Hairpin: a backend reaches its own service, itself included.
			expectSet(t, "x/a web (hairpin)", count(t, eps["a"], web, false, 40), "a", "b", "c")
			// Affinity pins each client to one backend.
			for _, c := range []*topology.Endpoint{d, e} {
				if got := count(t, c, netip.AddrPortFrom(vipAff, 80), false, 15); len(got) != 1 {
					t.Errorf("%s aff: answered by %v, want one backend", c.ID(), got)
				}
			}
			// internalTrafficPolicy Local: the client's host's backends only.
			expectSet(t, "x/d local", count(t, d, netip.AddrPortFrom(vipLocal, 80), false, 10), "a")
			expectSet(t, "x/e local", count(t, e, netip.AddrPortFrom(vipLocal, 80), false, 10), "c")
			// The backend's port unreachable reaches a UDP client as
			// its own: ECONNREFUSED (the ICMP error translated back).
			if err := udpRefused(d, netip.AddrPortFrom(vipDeaf, 53)); err != nil {
				t.Errorf("x/d -> deaf: %v", err)
			}
			// No backends: refused, at once.
			t0 := time.Now()
			_, err := askTCP(d, netip.AddrPortFrom(vipEmpty, 80))
			if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(t0) > time.Second {
				t.Errorf("x/d -> empty: %v after %v, want connection refused at once", err, time.Since(t0))
			}
			// NodePort (externalTrafficPolicy Cluster): flap's address.
			flap := spec.Links[0].Ends[1].WireAddr
			if spec.Links[0].Ends[1].Host != "flap" {
				flap = spec.Links[0].Ends[0].WireAddr
			}
			expectSet(t, "x/d nodeport", count(t, d, netip.AddrPortFrom(flap, 30080), false, 40), "a", "b", "c")
			// Cluster: masqueraded (kube-proxy: to flap's address on the
			// way out of flap; eBPF: to flip's masquerade address, where
			// the client's program translated it); Local: flap's own
			// backend, seeing the client.
			for name, srcs := range seen(t, d, netip.AddrPortFrom(flap, 30080), 20) {
				for _, src := range srcs {
					if src == d.IP.String() {
						t.Errorf("node port, policy Cluster: %s saw the client's own address %s", name, src)
					}
				}
			}
			if got := seen(t, d, netip.AddrPortFrom(flap, 30081), 10); len(got) != 1 || len(got["c"]) != 1 || got["c"][0] != d.IP.String() {
				t.Errorf("node port, policy Local: saw %v, want only x/c, seeing %s", got, d.IP)
			}
			// A ClusterIP keeps the client's address; a hairpin is
			// masqueraded (to the host's bridge address).
			for name, srcs := range seen(t, d, web, 20) {
				if len(srcs) != 1 || srcs[0] != d.IP.String() {
					t.Errorf("web: %s saw %v, want %s", name, srcs, d.IP)
				}
			}
			// With socket-level translation a hairpin connects to itself
			// over loopback, keeping its own address.
			if got := seen(t, eps["a"], web, 30); len(got["a"]) != 1 || (got["a"][0] == eps["a"].IP.String()) != spec.EBPF.SocketLB {
				t.Errorf("hairpin: x/a saw itself as %v (socket-level translation: %v)", got["a"], spec.EBPF.SocketLB)
			}

			// A second identical apply changes nothing in the kernel.
			before := kernelState(t, spec, tc.px)
			if err := p.Apply(ctx, spec, table(eps, "", "")); err != nil {
				t.Fatal(err)
			}
			if after := kernelState(t, spec, tc.px); after != before {
				t.Errorf("identical apply changed the kernel:\n--- before\n%s\n--- after\n%s", before, after)
			}

			// Removing a backend: an established connection to it keeps
			// working, no new connection reaches it, and a UDP socket
			// translated to it is moved on.
			var held *conn
			for i := 0; i < 60 && held == nil; i++ {
				c, err := dial(d, web)
				if err != nil {
					t.Fatal(err)
				}
				if name, err := c.ask(); err == nil && name == "b" {
					held = c
				} else {
					c.c.Close()
				}
			}
			if held == nil {
				t.Fatal("x/b never answered web")
			}
			defer held.c.Close()
			u, err := udpOpen(d)
			if err != nil {
				t.Fatal(err)
			}
			defer u.pc.Close()
			first, _, err := u.ask(dns)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Apply(ctx, spec, table(eps, "b", first)); err != nil {
				t.Fatal(err)
			}
			if name, err := held.ask(); err != nil || name != "b" {
				t.Errorf("established connection to x/b after its removal: %q, %v", name, err)
			}
			expectSet(t, "x/d web without b", count(t, d, web, false, 30), "a", "c")
			want := "a"
			if first == "a" {
				want = "c"
			}
			if name, _, err := u.ask(dns); err != nil || name != want {
				t.Errorf("UDP socket after its backend %s was removed: answered by %q (%v), want %s", first, name, err, want)
			}
			// A host whose state is lost is rebuilt from the kernel.
			for _, h := range spec.Hosts {
				for _, k := range []kind.Kind{"proxy-iptables", "proxy-nftables", "proxy-ebpf"} {
					_ = os.Remove(change.StatePath(spec.Name, k, h.Name))
				}
			}
			if err := p.Apply(ctx, spec, table(eps, "", "")); err != nil {
				t.Fatal(err)
			}
			expectSet(t, "x/e web after rebuild", count(t, e, web, false, 40), "a", "b", "c")
			if _, err := askTCP(d, netip.AddrPortFrom(vipEmpty, 80)); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("x/d -> empty after rebuild: %v", err)
			}
			// The policy datapath rebuilding a host leaves the proxy's
			// chains alone.
			for _, h := range spec.Hosts {
				_ = os.Remove(change.StatePath(spec.Name, spec.Datapath, h.Name))
			}
			if _, err := lab.Replace(ctx, spec.Name, nil); err != nil {
				t.Fatal(err)
			}
			expectSet(t, "x/d web after a policy rebuild", count(t, d, web, false, 40), "a", "b", "c")
			if _, err := askTCP(d, netip.AddrPortFrom(vipEmpty, 80)); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("x/d -> empty after a policy rebuild: %v", err)
			}
			desc, err := p.Describe(ctx, spec)
			if err != nil || len(desc["flip"]) == 0 {
				t.Errorf("describe: %v %q", err, desc)
			}
			t.Logf("%s: %v", tc.name, time.Since(start))
		})
	}
}
