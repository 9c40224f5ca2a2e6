package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// dsLab is a two-host lab of families %s (podCIDRs), with two web
// backends (one per host) and a client on each host.
const dsLab = `name: %s
hosts:
  - {name: flip, podCIDRs: [%s]}
  - {name: flap, podCIDRs: [%s]}
links:
  - {between: [flip, flap], kind: wire}
namespaces:
  x: {labels: {ns: x}}
  y: {labels: {ns: y}}
endpoints:
  - {name: w1, namespace: x, host: flip, ip: [%s], labels: {app: web}}
  - {name: w2, namespace: x, host: flap, ip: [%s], labels: {app: web}}
  - {name: c, namespace: y, host: flip, ip: [%s]}
  - {name: d, namespace: y, host: flap, ip: [%s]}
`

func upDualStackLab(t *testing.T, name, proxy string, dual bool) *topology.Spec {
	t.Helper()
	text := fmt.Sprintf(dsLab, name, "10.0.192.0/24, 'fd00:0:192::/64'", "10.0.191.0/24, 'fd00:0:191::/64'",
		"10.0.192.2, 'fd00:0:192::2'", "10.0.191.2, 'fd00:0:191::2'", "10.0.192.3, 'fd00:0:192::3'", "10.0.191.3, 'fd00:0:191::3'")
	if !dual {
		text = fmt.Sprintf(dsLab, name, "'fd00:0:192::/64'", "'fd00:0:191::/64'",
			"'fd00:0:192::2'", "'fd00:0:191::2'", "'fd00:0:192::3'", "'fd00:0:191::3'")
	}
	ov := topology.Overrides{Datapath: proxy, Proxy: proxy} // each proxy on its own datapath
	switch proxy {
	case "ebpf-legacy":
		// Legacy host routing, with socket-level translation.
		ov.Datapath, ov.Proxy = "ebpf", "ebpf"
		ov.Options = kind.Overrides{HostRouting: kind.HostRoutingLegacy, SocketLB: true}
	case "ebpf-hook":
		ov.Datapath, ov.Proxy = "ebpf", "ebpf"
		ov.Options = kind.Overrides{ConnectHook: true}
	}
	spec, err := topology.Parse([]byte(text), "dual-stack service lab", ov)
	if err != nil {
		t.Fatal(err)
	}
	return upForTest(t, spec)
}

// labSuffix names a proxy variant's lab: ipt, nft, ebp, ebl, ebh.
func labSuffix(proxy string) string {
	switch proxy {
	case "ebpf-legacy":
		return "ebl"
	case "ebpf-hook":
		return "ebh"
	}
	return proxy[:3]
}

// whoServers makes every x/w endpoint listen on port (both families, one
// socket) and answer each connection with "NAME SOURCE\n".
func whoServers(t *testing.T, spec *topology.Spec, port int) {
	t.Helper()
	for _, id := range []string{"x/w1", "x/w2"} {
		ep, _ := spec.Endpoint(id)
		var ln net.Listener
		if err := netns.Do(ep.Netns, func() (err error) { ln, err = net.Listen("tcp", fmt.Sprintf("[::]:%d", port)); return }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
				fmt.Fprintf(c, "%s %s\n", id, src.Addr().Unmap())
				c.Close()
			}
		}()
	}
}

// who connects from an endpoint to target and returns the backend's
// answer: its name and the source it saw.
func who(ep *topology.Endpoint, target netip.AddrPort) (string, netip.Addr, error) {
	var c net.Conn
	if err := netns.Do(ep.Netns, func() (err error) { c, err = net.DialTimeout("tcp", target.String(), time.Second); return }); err != nil {
		return "", netip.Addr{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", netip.Addr{}, err
	}
	name, src, _ := strings.Cut(strings.TrimSpace(line), " ")
	a, err := netip.ParseAddr(src)
	return name, a, err
}

const dsServices = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: x}
spec:
  type: NodePort
  ipFamilyPolicy: %s
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: sticky, namespace: x}
spec:
  ipFamilyPolicy: %s
  selector: {app: web}
  sessionAffinity: ClientIP
  ports: [{port: 81, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: x}
spec:
  ipFamilyPolicy: %s
  selector: {app: nothing}
  ports: [{port: 82}]
---
apiVersion: v1
kind: Service
metadata: {name: closed, namespace: x}
spec:
  type: NodePort
  ipFamilyPolicy: %s
  selector: {app: web}
  ports: [{port: 54, targetPort: 9999, protocol: UDP}]
`

// checkServices connects through every family's frontend of the lab's
// Services: the cluster IP reaches both backends with the client's own
// address; ClientIP affinity pins a client; a hairpin is masqueraded; a
// node port answers on a host's address of the family, masqueraded; a
// Service without backends refuses at once; a backend's port unreachable
// reaches a UDP client through a cluster IP and a node port.
func checkServices(t *testing.T, spec *topology.Spec, fams []int) {
	t.Helper()
	m, err := ServiceModel(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := spec.Endpoint("y/c")
	w1, _ := spec.Endpoint("x/w1")
	flap := spec.Host("flap")
	for _, fam := range fams {
		web, err := m.Resolved.FrontendOf("x/web", fam)
		if err != nil {
			t.Fatal(err)
		}
		if web.Family() != fam || len(web.Backends) != 2 {
			t.Fatalf("IPv%d frontend %+v", fam, web)
		}
		cAddr, _ := c.Addr(fam)
		seen := map[string]int{}
		for i := 0; i < 30; i++ {
			name, src, err := who(c, netip.AddrPortFrom(web.VIP, web.Port))
			if err != nil {
				t.Fatalf("IPv%d cluster IP %s: connection %d: %v", fam, web.VIP, i, err)
			}
			if src != cAddr {
				t.Errorf("IPv%d cluster IP: %s saw %s, want the client's %s", fam, name, src, cAddr)
			}
			seen[name]++
		}
		if len(seen) != 2 {
			t.Errorf("IPv%d cluster IP %s: backends reached %v, want both", fam, web.VIP, seen)
		}
		// Hairpin: w1 through its own Service, masqueraded when it
		// reaches itself (but over loopback with IPv4 socket-level
		// translation: the model's HairpinLocal).
		w1Addr, _ := w1.Addr(fam)
		hairpinLocal := m.Expect(w1, web).HairpinLocal
		for i := 0; i < 10; i++ {
			name, src, err := who(w1, netip.AddrPortFrom(web.VIP, web.Port))
			if err != nil {
				t.Fatalf("IPv%d hairpin: %v", fam, err)
			}
			if name == "x/w1" && src == w1Addr && !hairpinLocal {
				t.Errorf("IPv%d hairpin not masqueraded: x/w1 saw itself", fam)
			}
		}
		// Node port on flap's bridge address of the family, from c on
		// flip: masqueraded (externalTrafficPolicy Cluster).
		np := netip.AddrPortFrom(service.NodeAddressOf(flap, fam), web.NodePort)
		for i := 0; i < 10; i++ {
			name, src, err := who(c, np)
			if err != nil {
				t.Fatalf("IPv%d node port %s: %v", fam, np, err)
			}
			if src == cAddr || topology.Family(src) != fam {
				t.Errorf("IPv%d node port %s: %s saw %s (want a masqueraded IPv%d address)", fam, np, name, src, fam)
			}
		}
		sticky, err := m.Resolved.FrontendOf("x/sticky", fam)
		if err != nil {
			t.Fatal(err)
		}
		first := ""
		for i := 0; i < 10; i++ {
			name, _, err := who(c, netip.AddrPortFrom(sticky.VIP, sticky.Port))
			if err != nil {
				t.Fatalf("IPv%d affinity: %v", fam, err)
			}
			if first == "" {
				first = name
			} else if name != first {
				t.Errorf("IPv%d ClientIP affinity: %s then %s", fam, first, name)
			}
		}
		empty, err := m.Resolved.FrontendOf("x/empty", fam)
		if err != nil {
			t.Fatal(err)
		}
		// Refused. IPv6: only at the first retransmission, the kernel's
		// doing (docs/services.md, "Dual-stack": the first SYN's port
		// unreachable arrives within connect(), while the socket is
		// held, is kept as a soft error and, without IPV6_RECVERR, wakes
		// no one).
		start := time.Now()
		var conn net.Conn
		err = netns.Do(c.Netns, func() (err error) {
			conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(empty.VIP, empty.Port).String(), 3500*time.Millisecond)
			return
		})
		if conn != nil {
			conn.Close()
		}
		took := time.Since(start)
		switch {
		case !errors.Is(err, syscall.ECONNREFUSED):
			t.Errorf("IPv%d Service without backends %s: %v after %s, want connection refused", fam, empty.VIP, err, took)
		case fam == 4 && took > 500*time.Millisecond:
			t.Errorf("IPv4 Service without backends %s: refused after %s, want at once", empty.VIP, took)
		case took > 500*time.Millisecond:
			t.Logf("IPv6 Service without backends %s: refused after %s (the kernel kept the first SYN's port unreachable as a soft error)", empty.VIP, took)
		}
		// A backend's port unreachable reaches the client's UDP socket
		// translated back: through the cluster IP, and through flap's
		// node port (masqueraded). No ICMP rate limit in the way.
		closed, err := m.Resolved.FrontendOf("x/closed", fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"x/w1", "x/w2"} {
			ep, _ := spec.Endpoint(id)
			sysctl := "/proc/sys/net/ipv4/icmp_ratelimit"
			if fam == 6 {
				sysctl = "/proc/sys/net/ipv6/icmp/ratelimit"
			}
			if err := netns.Do(ep.Netns, func() error { return os.WriteFile(sysctl, []byte("0"), 0o644) }); err != nil {
				t.Fatal(err)
			}
		}
		for _, to := range []netip.AddrPort{netip.AddrPortFrom(closed.VIP, closed.Port),
			netip.AddrPortFrom(service.NodeAddressOf(flap, fam), closed.NodePort)} {
			for try := 1; try <= 4; try++ {
				if err := refusedUDP(spec, "y/c", to); err != nil {
					t.Errorf("IPv%d UDP to %s (closed backend port), datagram %d: %v", fam, to, try, err)
					break
				}
			}
		}
	}
}

// TestDualStackServices: on a dual-stack lab, PreferDualStack Services
// answer on their IPv4 and their IPv6 cluster IPs (and node ports) through
// each proxy (iptables, nftables, ebpf with either host routing), with
// real connections.
func TestDualStackServices(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "ip6tables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	ctx := context.Background()
	for _, proxy := range []string{"iptables", "nftables", "ebpf", "ebpf-legacy"} {
		t.Run(proxy, func(t *testing.T) {
			spec := upDualStackLab(t, "h6s-ds-"+labSuffix(proxy), proxy, true)
			whoServers(t, spec, 8080)
			p := "PreferDualStack"
			svcs, sls, err := service.Parse([]byte(fmt.Sprintf(dsServices, p, p, p, p)), "dual-stack services")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ApplyServices(ctx, spec.Name, svcs, sls); err != nil {
				t.Fatal(err)
			}
			checkServices(t, spec, []int{4, 6})
			// Applied again: nothing changes, everything still answers.
			if _, err := ApplyServices(ctx, spec.Name, svcs, sls); err != nil {
				t.Fatal(err)
			}
			checkServices(t, spec, []int{6})
		})
	}
}

// TestIPv6OnlyServices: on an IPv6-only lab, SingleStack Services (the
// default) get IPv6 cluster IPs and answer through each proxy.
func TestIPv6OnlyServices(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip6tables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	ctx := context.Background()
	for _, proxy := range []string{"iptables", "nftables", "ebpf", "ebpf-legacy"} {
		t.Run(proxy, func(t *testing.T) {
			spec := upDualStackLab(t, "h6s-v6-"+labSuffix(proxy), proxy, false)
			whoServers(t, spec, 8080)
			p := "SingleStack"
			svcs, sls, err := service.Parse([]byte(fmt.Sprintf(dsServices, p, p, p, p)), "IPv6 services")
			if err != nil {
				t.Fatal(err)
			}
			ch, err := ApplyServices(ctx, spec.Name, svcs, sls)
			if err != nil {
				t.Fatal(err)
			}
			vip := ch.Resolved.VIP["x/web"]
			if !vip.Is6() {
				t.Fatalf("x/web's cluster IP %s is not IPv6", vip)
			}
			if strings.HasPrefix(proxy, "ebpf") {
				// service show --kernel lists the IPv6 frontends.
				desc, err := DescribeServices(ctx, spec.Name)
				if err != nil {
					t.Fatal(err)
				}
				if d := desc["flip"]; !strings.Contains(d, "IPv6 services on") || !strings.Contains(d, "["+vip.String()+"]:80/tcp") {
					t.Errorf("flip's kernel state does not list %s:\n%s", vip, d)
				}
			}
			checkServices(t, spec, []int{6})
		})
	}
}

// TestServiceConnectHookDualStack is TestServiceConnectHook over both
// families: with the connect hook, a connect to a cluster IP or to a node
// port of either family is judged after translation, on its backend (the
// tc programs), not on the Service's or the node's address; a client
// whose egress allows only the backends' port reaches both, and is
// refused at once elsewhere.
func TestServiceConnectHookDualStack(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip6tables-legacy-restore", "iptables")
	ctx := context.Background()
	spec := upDualStackLab(t, "t-svhook-ds", "ebpf-hook", true)
	whoServers(t, spec, 8080)
	p := "PreferDualStack"
	svcs, sls, err := service.Parse([]byte(fmt.Sprintf(dsServices, p, p, p, p)), "dual-stack services")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyServices(ctx, spec.Name, svcs, sls); err != nil {
		t.Fatal(err)
	}
	pols, err := policy.Parse([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: web-only, namespace: y}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n  egress: [{to: [{namespaceSelector: {matchLabels: {ns: x}}}], ports: [{port: 8080}]}]\n"), "web-only")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Replace(ctx, spec.Name, pols); err != nil {
		t.Fatal(err)
	}
	m, err := ServiceModel(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := spec.Endpoint("y/c")
	w1, _ := spec.Endpoint("x/w1")
	flap := spec.Host("flap")
	for _, fam := range []int{4, 6} {
		web, err := m.Resolved.FrontendOf("x/web", fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range []netip.AddrPort{netip.AddrPortFrom(web.VIP, web.Port),
			netip.AddrPortFrom(service.NodeAddressOf(flap, fam), web.NodePort)} {
			for i := 0; i < 4; i++ {
				if _, _, err := who(c, to); err != nil {
					t.Errorf("IPv%d y/c -> %s (egress allows the backends' port): %v", fam, to, err)
					break
				}
			}
		}
		// The backend itself on another port: refused at the socket.
		a, _ := w1.Addr(fam)
		to := netip.AddrPortFrom(a, 9090)
		if took, err := dial(t, c, to, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) || took > time.Second {
			t.Errorf("IPv%d y/c -> %s (egress denies the port): %v after %v, want refused at once", fam, to, err, took)
		}
	}
}
