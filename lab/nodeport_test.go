package lab

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// nodePortDeny allows the web backends from every address (fromCIDR
// 0.0.0.0/0) but denies y/c1 (ingressDeny fromEndpoints). In Cilium a CIDR
// selector never selects the cluster's own hosts or pods, so no source a
// node port can give c1's connection (c1 itself, a host's address, a
// masquerade address) is allowed by the CIDR rule.
const nodePortDeny = `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: web, namespace: x}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromCIDR: [0.0.0.0/0]
  ingressDeny:
  - fromEndpoints: [{matchLabels: {app: client, k8s:io.kubernetes.pod.namespace: y}}]
`

// nodePortLabs are the datapaths of the node-port tests: each netfilter
// datapath with its own proxy, eBPF in both host routings.
var nodePortLabs = []struct {
	name, dp, proxy, link string
	ov                    kind.Overrides
}{
	{"t-np-ipt", string(kind.IPTables), string(kind.ProxyIPTables), "wire", kind.Overrides{}},
	{"t-np-nft", string(kind.NFTables), string(kind.ProxyNFTables), "vxlan", kind.Overrides{}},
	{"t-np-ebpf", string(kind.EBPF), string(kind.ProxyEBPF), "wire", kind.Overrides{}},
	{"t-np-ebl", string(kind.EBPF), string(kind.ProxyEBPF), "vxlan", kind.Overrides{HostRouting: kind.HostRoutingLegacy}},
}

// reached opens n fresh TCP connections from an endpoint to target (16 at
// a time) and counts those that connected.
func reached(from *topology.Endpoint, target netip.AddrPort, n int, timeout time.Duration) int {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	ok := 0
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := netns.Do(from.Netns, func() error {
				c, err := net.DialTimeout("tcp4", target.String(), timeout)
				if err == nil {
					c.Close()
				}
				return err
			})
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok
}

// TestNodePortIngressDeny: a client named in a CiliumNetworkPolicy's
// ingressDeny is refused by every backend through a node port as it is
// directly and through the cluster IP, on every host's node port and on
// every datapath, although the backends allow fromCIDR 0.0.0.0/0: the
// source a node port gives the connection (masqueraded on netfilter and on
// eBPF under externalTrafficPolicy Cluster) is a host's or the lab's own
// address, which a CIDR selector does not select (issue 32, defect 4).
func TestNodePortIngressDeny(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	ctx := context.Background()
	for _, c := range nodePortLabs {
		t.Run(c.name, func(t *testing.T) {
			spec := upServiceLab(t, c.name, c.dp, c.proxy, c.link, c.ov)
			svcs, _, err := service.Parse([]byte(svcDoc("np", "  type: NodePort\n  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n")), "np")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ApplyServices(ctx, spec.Name, svcs, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := Replace(ctx, spec.Name, mustParse(t, nodePortDeny)); err != nil {
				t.Fatal(err)
			}
			f := nodePortBackends(t, spec)
			c1, _ := spec.Endpoint("y/c1")
			w3, _ := spec.Endpoint("x/w3")
			targets := []struct {
				what string
				to   netip.AddrPort
			}{
				{"x/w3 directly", netip.AddrPortFrom(w3.IP, 8081)},
				{"the cluster IP", netip.AddrPortFrom(f.VIP, f.Port)},
			}
			for _, h := range spec.Hosts {
				targets = append(targets, struct {
					what string
					to   netip.AddrPort
				}{"the node port on " + h.Name, netip.AddrPortFrom(service.NodeAddress(&h), f.NodePort)})
			}
			const n = 32
			for _, tg := range targets {
				if got := reached(c1, tg.to, n, 300*time.Millisecond); got != 0 {
					t.Errorf("%s: y/c1 (ingressDeny) reached a backend through %s (%s) %d times out of %d", c.name, tg.what, tg.to, got, n)
				}
			}
		})
	}
}

// nodePortPolicies are policy sets under which the model must predict
// every client's connections through every host's node port: each makes
// the datapaths' judging points (the client, a host's address, a
// masquerade address) give different answers.
var nodePortPolicies = []struct{ name, policies string }{
	{"ingressDeny with fromCIDR 0.0.0.0/0", nodePortDeny},
	{"ingress from the clients' namespace", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: from-y, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress: [{from: [{namespaceSelector: {matchLabels: {team: client}}}]}]\n"},
	{"ipBlock of the lab's addresses", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: from-lab, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}}, {ipBlock: {cidr: 100.64.0.0/10}}]}]\n"},
	{"egress to the backends only", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: to-x, namespace: y}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n  egress: [{to: [{namespaceSelector: {matchLabels: {team: web}}}]}]\n"},
}

// TestNodePortModel: under each policy set, every client's connections to
// a NodePort Service through every host's node port (externalTrafficPolicy
// Cluster and Local) reach what the model says, and each backend sees the
// source the model says, on every datapath.
func TestNodePortModel(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	ctx := context.Background()
	svcs, _, err := service.Parse([]byte(svcDoc("np", "  type: NodePort\n  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n")+
		svcDoc("npl", "  type: NodePort\n  externalTrafficPolicy: Local\n  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n")), "np")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range nodePortLabs {
		t.Run(c.name, func(t *testing.T) {
			spec := upServiceLab(t, c.name, c.dp, c.proxy, c.link, c.ov)
			if _, err := ApplyServices(ctx, spec.Name, svcs, nil); err != nil {
				t.Fatal(err)
			}
			for _, pc := range nodePortPolicies {
				if _, err := Replace(ctx, spec.Name, mustParse(t, pc.policies)); err != nil {
					t.Fatal(err)
				}
				m, err := ServiceModel(spec.Name)
				if err != nil {
					t.Fatal(err)
				}
				for _, ref := range []string{"x/np", "x/npl"} {
					f, err := m.Resolved.Frontend(ref)
					if err != nil {
						t.Fatal(err)
					}
					for _, h := range spec.Hosts {
						res, err := probe.ProbeService(ctx, m, f, probe.ServiceOptions{Timeout: 300 * time.Millisecond, NodeHost: h.Name})
						if err != nil {
							t.Fatalf("%s: %v", pc.name, err)
						}
						probe.CheckService(f, res, 0, testAlpha)
						for _, r := range res {
							for _, mm := range r.Mismatches {
								t.Errorf("%s: %s node port on %s from %s: %s", pc.name, ref, h.Name, r.From, mm)
							}
						}
					}
				}
			}
		})
	}
}
