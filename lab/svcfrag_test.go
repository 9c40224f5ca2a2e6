package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// svcPathLab is one lab of the packet-path Service tests: each service
// proxy on its own datapath (else the first it pairs with), and eBPF with
// legacy host routing beside it.
type svcPathLab struct {
	name, dp, proxy string
	ov              kind.Overrides
}

func svcPathLabs(prefix string) []svcPathLab {
	var out []svcPathLab
	for _, p := range kind.ServingProxies() {
		dps := p.Datapaths()
		dp := dps[0]
		if slices.Contains(dps, kind.Kind(p)) {
			dp = kind.Kind(p) // the proxy's own datapath
		}
		out = append(out, svcPathLab{name: prefix + shortName(string(p)), dp: string(dp), proxy: string(p)})
		if dp == kind.EBPF {
			out = append(out, svcPathLab{name: prefix + short["ebpf-legacy"], dp: string(dp), proxy: string(p),
				ov: kind.Overrides{HostRouting: kind.HostRoutingLegacy}})
		}
	}
	return out
}

// upSvcPathLab brings up the service lab (svcLab, over a wire) for l and
// applies the Services in docs.
func upSvcPathLab(t *testing.T, l svcPathLab, docs string) (*topology.Spec, *service.Model) {
	t.Helper()
	testutil.RequireRoot(t)
	switch l.proxy {
	case "iptables":
		testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	case "nftables":
		testutil.RequireTool(t, "nft", "nftables")
	}
	spec := upServiceLab(t, l.name, l.dp, l.proxy, "wire", l.ov)
	svcs, sls, err := service.Parse([]byte(docs), "services")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyServices(context.Background(), spec.Name, svcs, sls); err != nil {
		t.Fatal(err)
	}
	m, err := ServiceModel(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	return spec, m
}

// svcTarget is a client and an address:port it sends to.
type svcTarget struct {
	from string
	to   netip.AddrPort
	what string
}

// frontendTargets are, for each client, the cluster IP of ref and its node
// port on each host in nodes.
func frontendTargets(t *testing.T, spec *topology.Spec, m *service.Model, ref string, clients, nodes []string) []svcTarget {
	t.Helper()
	f, err := m.Resolved.Frontend(ref)
	if err != nil {
		t.Fatal(err)
	}
	var out []svcTarget
	for _, c := range clients {
		out = append(out, svcTarget{c, netip.AddrPortFrom(f.VIP, uint16(f.Port)), "cluster IP"})
		for _, n := range nodes {
			if f.NodePort != 0 {
				out = append(out, svcTarget{c, netip.AddrPortFrom(service.NodeAddress(spec.Host(n)), uint16(f.NodePort)), "node port on " + n})
			}
		}
	}
	return out
}

// dialUDP opens a UDP socket in the endpoint's namespace connected to dst.
func dialUDP(spec *topology.Spec, from string, dst netip.AddrPort) (*net.UDPConn, error) {
	ep, err := spec.Endpoint(from)
	if err != nil {
		return nil, err
	}
	var c *net.UDPConn
	err = netns.Do(ep.Netns, func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst)) // an IPv4 socket for an IPv4 dst
		return err
	})
	return c, err
}

// udpEcho answers every datagram on addr inside ns with the same bytes.
func udpEcho(t *testing.T, ns string, addr netip.AddrPort) {
	t.Helper()
	var c *net.UDPConn
	if err := netns.Do(ns, func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close(); wg.Wait() })
}

// TestServiceUDPFragments: a UDP datagram larger than the path MTU (4000
// bytes over 1500) sent to a cluster IP or a node port reaches a backend
// whole, and the backend's answer of the same size reaches the client
// whole, on every service proxy (and eBPF in both host routings): every
// fragment is translated, not only the first, which carries the ports.
// Clients on the backends' host and on the other, and a backend reaching
// its own Service (hairpin).
func TestServiceUDPFragments(t *testing.T) {
	const size = 4000
	docs := svcDoc("big", "  type: NodePort\n  selector: {app: web}\n  ports: [{port: 53, targetPort: dns, protocol: UDP, nodePort: 30053}]\n")
	for _, l := range svcPathLabs("t-svf-") {
		t.Run(l.name[len("t-svf-"):], func(t *testing.T) {
			spec, m := upSvcPathLab(t, l, docs)
			for _, id := range []string{"x/w1", "x/w2", "x/w3"} {
				ep, _ := spec.Endpoint(id)
				udpEcho(t, ep.Netns, netip.AddrPortFrom(ep.IP, 5353))
			}
			targets := frontendTargets(t, spec, m, "x/big", []string{"y/c1", "y/c2", "x/w3"}, []string{"flip", "flap"})
			for _, tg := range targets {
				for try := 1; try <= 6; try++ {
					if err := exchangeUDP(spec, tg.from, tg.to, size); err != nil {
						t.Errorf("%s -> %s (%s), %d-byte datagram %d: %v", tg.from, tg.to, tg.what, size, try, err)
						break
					}
				}
			}
		})
	}
}

// exchangeUDP sends one datagram of n random bytes from a new connected
// socket and checks that the same bytes come back in one datagram.
func exchangeUDP(spec *topology.Spec, from string, to netip.AddrPort, n int) error {
	c, err := dialUDP(spec, from, to)
	if err != nil {
		return err
	}
	defer c.Close()
	msg := make([]byte, n)
	_, _ = rand.Read(msg)
	if _, err := c.Write(msg); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 65536)
	got, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !bytes.Equal(buf[:got], msg) {
		return fmt.Errorf("%d bytes came back, not the %d sent", got, n)
	}
	return nil
}

// TestServiceICMPErrors: an ICMP error about a translated flow reaches
// the client translated back, so that its socket sees it: a connected UDP
// socket sending to a Service whose backends' port is closed gets
// ECONNREFUSED on its next read, on every service proxy (and eBPF in both
// host routings). Through the cluster IP from the backends' host and the
// other; through a node port (masqueraded under externalTrafficPolicy
// Cluster); and a backend reaching its own Service (hairpin,
// masqueraded to the host's address).
func TestServiceICMPErrors(t *testing.T) {
	docs := svcDoc("closed", "  type: NodePort\n  selector: {app: web}\n  ports: [{port: 54, targetPort: 9999, protocol: UDP, nodePort: 30054}]\n") +
		svcDoc("self", "  ports: [{name: u, port: 55, protocol: UDP}]\n") +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: self-1, namespace: x, labels: {kubernetes.io/service-name: self}}\naddressType: IPv4\n" +
		"ports: [{name: u, port: 9999, protocol: UDP}]\nendpoints:\n  - {addresses: [10.0.192.2], nodeName: flip}\n"
	for _, l := range svcPathLabs("t-sve-") {
		t.Run(l.name[len("t-sve-"):], func(t *testing.T) {
			spec, m := upSvcPathLab(t, l, docs)
			// Each backend answers every datagram with its error: no
			// ICMP rate limit (a burst of 6 a peer) in the way.
			for _, id := range []string{"x/w1", "x/w2", "x/w3"} {
				ep, _ := spec.Endpoint(id)
				if err := netns.Do(ep.Netns, func() error {
					return os.WriteFile("/proc/sys/net/ipv4/icmp_ratelimit", []byte("0"), 0o644)
				}); err != nil {
					t.Fatal(err)
				}
			}
			w1, _ := spec.Endpoint("x/w1")
			if w1.IP.String() != "10.0.192.2" {
				t.Fatalf("x/w1 is %s, the slice names 10.0.192.2", w1.IP)
			}
			targets := frontendTargets(t, spec, m, "x/closed", []string{"y/c1", "y/c2"}, []string{"flip", "flap"})
			targets = append(targets, frontendTargets(t, spec, m, "x/self", []string{"x/w1"}, nil)[0])
			targets[len(targets)-1].what = "hairpin"
			for _, tg := range targets {
				for try := 1; try <= 6; try++ {
					if err := refusedUDP(spec, tg.from, tg.to); err != nil {
						t.Errorf("%s -> %s (%s), datagram %d to a closed port: %v", tg.from, tg.to, tg.what, try, err)
						break
					}
				}
			}
		})
	}
}

// refusedUDP sends a datagram from a new connected socket and wants its
// next read to fail with ECONNREFUSED.
func refusedUDP(spec *topology.Spec, from string, to netip.AddrPort) error {
	c, err := dialUDP(spec, from, to)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("anyone?")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 64))
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	if err == nil {
		return errors.New("an answer came from a closed port")
	}
	return fmt.Errorf("want ECONNREFUSED, got %w", err)
}

// TestServicePathMTU: a "fragmentation needed" about a translated flow
// reaches the client translated back, so path MTU discovery works through
// a Service, on every service proxy (and eBPF in both host routings).
// Clients on flip reach the Service's only backend, x/w3 on flap, over a
// wire whose MTU both hosts lower to 1400, through its cluster IP and its node
// ports on flip and flap (masqueraded under Cluster): flip's stack, or on
// eBPF with a masqueraded flow its program, answers a 1450-byte datagram
// sent with DF (IP_PMTUDISC_DO) with the error, which y/c1's connected
// UDP socket must see as EMSGSIZE, learning the MTU; and x/w1's TCP
// exchange of 200 kB must complete (a lost error would black-hole its
// full-size segments).
func TestServicePathMTU(t *testing.T) {
	docs := svcDoc("far", "  type: NodePort\n  ports: [{name: u, port: 56, protocol: UDP, nodePort: 30056}, {name: t, port: 80, protocol: TCP, nodePort: 30080}]\n") +
		"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: far-1, namespace: x, labels: {kubernetes.io/service-name: far}}\naddressType: IPv4\n" +
		"ports: [{name: u, port: 5353, protocol: UDP}, {name: t, port: 8081, protocol: TCP}]\nendpoints:\n  - {addresses: [10.0.191.2], nodeName: flap}\n"
	for _, l := range svcPathLabs("t-svm-") {
		t.Run(l.name[len("t-svm-"):], func(t *testing.T) {
			spec, m := upSvcPathLab(t, l, docs)
			w3, _ := spec.Endpoint("x/w3")
			if w3.IP.String() != "10.0.191.2" {
				t.Fatalf("x/w3 is %s, the slice names 10.0.191.2", w3.IP)
			}
			udpEcho(t, w3.Netns, netip.AddrPortFrom(w3.IP, 5353))
			srv, err := testutil.ListenEcho(w3.Netns, netip.AddrPortFrom(w3.IP, 8081))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			for _, name := range []string{"flip", "flap"} {
				if err := setWireMTU(spec.Host(name), 1400); err != nil {
					t.Fatal(err)
				}
			}
			w1, _ := spec.Endpoint("x/w1")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			udp := frontendTargets(t, spec, m, "x/far:u", []string{"y/c1"}, []string{"flip", "flap"})
			tcp := frontendTargets(t, spec, m, "x/far:t", []string{"x/w1"}, []string{"flip", "flap"})
			for i := range udp {
				if err := tooBigUDP(spec, udp[i].from, udp[i].to, 1450, 1400); err != nil {
					t.Errorf("%s -> %s (%s), 1450 bytes with DF over a 1400-byte hop: %v", udp[i].from, udp[i].to, udp[i].what, err)
				}
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if err := testutil.ExchangeTCP(ctx, w1.Netns, tcp[i].to, 200_000); err != nil {
					t.Errorf("%s -> %s (%s), 200 kB over TCP through a 1400-byte hop: %v", tcp[i].from, tcp[i].to, tcp[i].what, err)
				}
				cancel()
			}
		})
	}
}

// setWireMTU sets the MTU of a host's end of its wire to the other host.
func setWireMTU(host *topology.Host, mtu int) error {
	if len(host.Routes) == 0 {
		return fmt.Errorf("%s has no route to another host", host.Name)
	}
	h, err := netns.Handle(host.Netns)
	if err != nil {
		return err
	}
	defer h.Delete()
	wire, err := h.LinkByName(host.Routes[0].Dev)
	if err != nil {
		return err
	}
	return h.LinkSetMTU(wire, mtu)
}

// tooBigUDP sends n bytes with DF from a new connected socket and wants
// its next read to fail with EMSGSIZE and the socket to know the path's
// MTU.
func tooBigUDP(spec *topology.Spec, from string, to netip.AddrPort, n, mtu int) error {
	c, err := dialUDP(spec, from, to)
	if err != nil {
		return err
	}
	defer c.Close()
	return tooBigOn(c, n, mtu)
}

// tooBigOn sends n bytes that may not be fragmented on a connected UDP
// socket of either family and wants its next read to fail with EMSGSIZE
// and the socket to know the path's MTU.
func tooBigOn(c *net.UDPConn, n, mtu int) error {
	level, discover, do, mtuOpt := syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, syscall.IP_PMTUDISC_DO, syscall.IP_MTU
	if a, ok := c.RemoteAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		level, discover, do, mtuOpt = syscall.IPPROTO_IPV6, syscall.IPV6_MTU_DISCOVER, syscall.IPV6_PMTUDISC_DO, syscall.IPV6_MTU
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), level, discover, do)
	}); err != nil || serr != nil {
		return errors.Join(err, serr)
	}
	if _, err := c.Write(make([]byte, n)); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 65536))
	if !errors.Is(err, syscall.EMSGSIZE) {
		return fmt.Errorf("want EMSGSIZE, got %v", err)
	}
	var got int
	if err := rc.Control(func(fd uintptr) {
		got, serr = syscall.GetsockoptInt(int(fd), level, mtuOpt)
	}); err != nil || serr != nil {
		return errors.Join(err, serr)
	}
	if got != mtu {
		return fmt.Errorf("the socket's path MTU is %d, want %d", got, mtu)
	}
	return nil
}
