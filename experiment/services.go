package experiment

import (
	"context"
	"fmt"
	"github.com/cnlab/cnlab/experiment/results"
	"net/netip"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// fillerBackends are the addresses of the other Services' backends: the
// benchmarking range (RFC 2544), never a lab's, since no connection goes
// to those Services. They only make the proxies' tables as large as N
// Services of B backends each.
var fillerBackends = netip.MustParseAddr("198.18.0.1")

// fillerBackends6 are those of a point with ipFamily 6: IPv6's
// benchmarking range (RFC 5180).
var fillerBackends6 = netip.MustParseAddr("2001:2::1")

// resolveServiceParams fills the service keys' defaults and checks them.
func resolveServiceParams(p *results.Params, bad func(key, format string, args ...any) error) error {
	// Without Services, backends and position change nothing: the point
	// is measured once (Points' dedup ignores them), but keeps the values
	// so that it lies on the same line as the points with Services.
	if p.ServiceBackends == 0 {
		p.ServiceBackends = 1
	}
	if p.ServicePosition == "" || p.Services == 1 {
		p.ServicePosition = results.PositionLast // one Service is first and last
	}
	if p.Services == 0 {
		return nil
	}
	if p.ServiceProxy == "" {
		p.ServiceProxy = kind.DefaultProxy(p.Datapath)
	}
	if p.ServiceProxy == kind.ProxyNone {
		return bad("serviceProxy", "%d Services need a service proxy, not none (give serviceProxy: [iptables], [nftables] or, on the ebpf datapath, [ebpf])", p.Services)
	}
	if why := p.ServiceProxy.Pairs(p.Datapath); why != "" {
		return bad("serviceProxy", "%s", why)
	}
	return nil
}

// serviceSet identifies the Services a point installs (serviceText's
// parameters).
func serviceSet(p results.Params) string {
	if p.Services == 0 {
		return "0"
	}
	return fmt.Sprint(p.Services, p.ServiceBackends, p.ServicePosition)
}

// measuredService is the name of the Service the workloads connect
// through.
func measuredService(p results.Params) string {
	if p.ServicePosition == results.PositionFirst {
		return serviceName(0)
	}
	return serviceName(p.Services - 1)
}

func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// serviceText generates the point's Services as Kubernetes YAML: the
// measured one selects the server (app=server) with every workload port
// mapped to itself, so the workloads only change the address they dial;
// each other one maps port 80 to 8080 of ServiceBackends addresses of a
// user-written EndpointSlice. "" for none.
func serviceText(p results.Params) string {
	if p.Services == 0 {
		return ""
	}
	var b strings.Builder
	measured := measuredService(p)
	var eps []string
	addr, family, addrType := fillerBackends, "", "IPv4"
	if p.IPFamily == 6 { // every Service an IPv6 one: the point measures IPv6's tables
		addr, family, addrType = fillerBackends6, "  ipFamilies: [IPv6]\n", "IPv6"
	}
	for range p.ServiceBackends {
		eps = append(eps, fmt.Sprintf("{addresses: [%s]}", addr))
		addr = addr.Next()
	}
	endpoints := strings.Join(eps, ", ")
	for i := range p.Services {
		name := serviceName(i)
		if name == measured {
			fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec:\n%s  selector: {app: server}\n  ports:\n", name, topology.DefaultNamespace, family)
			for f := range results.MaxFlows {
				for _, proto := range []string{"TCP", "UDP"} {
					fmt.Fprintf(&b, "  - {name: %s%d, port: %d, protocol: %s}\n", strings.ToLower(proto[:1]), IperfPort+f, IperfPort+f, proto)
				}
			}
			fmt.Fprintf(&b, "  - {name: rr-tcp, port: %d, protocol: TCP}\n  - {name: rr-udp, port: %d, protocol: UDP}\n---\n", RRPort, RRPort)
			continue
		}
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec:\n%s  ports: [{port: 80, targetPort: 8080}]\n---\n", name, topology.DefaultNamespace, family)
		fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: %s-1, namespace: %s, labels: {kubernetes.io/service-name: %s}}\naddressType: %s\nports: [{port: 8080}]\nendpoints: [%s]\n---\n",
			name, topology.DefaultNamespace, name, addrType, endpoints)
	}
	return b.String()
}

// services installs the point's Services in the lab, replacing what the
// previous point installed, records how long that took, and returns the
// address the workloads (but ping) connect to: the measured Service's
// cluster IP, or the server's address without Services.
func (l *labBackend) services(ctx context.Context, p results.Params, b *results.Build, _ int) (netip.Addr, error) {
	sv, err := l.cur.Endpoint(topology.DefaultNamespace + "/server")
	if err != nil {
		return netip.Addr{}, err
	}
	text := serviceText(p)
	if text == l.curSvc {
		return dest(l.curVIP, serverAddr(sv, p)), nil
	}
	a := results.ServiceApply{Services: p.Services, Backends: p.ServiceBackends}
	var ch *lab.ServiceChange
	var svcs []*service.Service
	var sls []*service.Slice
	if text != "" {
		svcs, sls, err = service.Parse([]byte(text), "generated Services")
	}
	if err == nil {
		t0 := time.Now()
		ch, err = lab.ReplaceServices(ctx, l.cur.Name, svcs, sls)
		a.Seconds = time.Since(t0).Seconds()
	}
	if err != nil {
		a.Error = err.Error()
	}
	b.ServiceApply = append(b.ServiceApply, a)
	if err != nil {
		l.curSvc = policyUnknown // the hosts may hold part of it
		return netip.Addr{}, fmt.Errorf("install %d Services: %w", p.Services, err)
	}
	l.curSvc, l.curVIP = text, netip.Addr{}
	if p.Services > 0 {
		key := topology.DefaultNamespace + "/" + measuredService(p)
		vip, ok := ch.Resolved.VIP[key]
		if p.IPFamily != 0 {
			ok = false
			for _, a := range ch.Resolved.VIPs[key] {
				if topology.Family(a) == p.IPFamily {
					vip, ok = a, true
				}
			}
		}
		if !ok {
			return netip.Addr{}, fmt.Errorf("install %d Services: %s got no cluster IP", p.Services, key)
		}
		l.curVIP = vip
	}
	return dest(l.curVIP, serverAddr(sv, p)), nil
}

// dest is where the workloads connect: the measured Service, if any.
func dest(vip, server netip.Addr) netip.Addr {
	if vip.IsValid() {
		return vip
	}
	return server
}
