// Package proxytest holds the service table the proxies' golden tests
// render. It is imported by tests only.
package proxytest

import (
	"net/netip"

	"github.com/cnlab/cnlab/service"
)

func be(ep, host, ip string, port uint16) service.Backend {
	return service.Backend{Endpoint: ep, Host: host, IP: netip.MustParseAddr(ip), Port: port}
}

// Table is a small table with one frontend of each shape: two backends
// with affinity, a UDP one, one without backends, internalTrafficPolicy
// Local, and a NodePort with externalTrafficPolicy Local.
func Table() *service.Table {
	return &service.Table{Frontends: []service.Frontend{
		{Service: "x/dns", Protocol: "udp", VIP: netip.MustParseAddr("10.96.0.10"), Port: 53,
			Backends: []service.Backend{be("x/a", "flip", "10.0.192.10", 5353)}},
		{Service: "x/empty", Protocol: "tcp", VIP: netip.MustParseAddr("10.96.0.11"), Port: 80},
		{Service: "x/local", Protocol: "tcp", VIP: netip.MustParseAddr("10.96.0.12"), Port: 80, InternalLocal: true,
			Backends: []service.Backend{be("x/b", "flap", "10.0.191.11", 8080)}},
		{Service: "x/web", PortName: "http", Protocol: "tcp", VIP: netip.MustParseAddr("10.96.0.13"), Port: 80,
			NodePort: 30080, ExternalLocal: true, Affinity: 30,
			Backends: []service.Backend{be("x/a", "flip", "10.0.192.10", 8080), be("x/b", "flap", "10.0.191.11", 8080)}},
	}}
}

// DualTable is Table with every frontend's IPv6 counterpart after it, as
// a dual-stack lab resolves PreferDualStack Services: cluster IPs from
// fd00:96::/108, backends' IPv6 addresses.
func DualTable() *service.Table {
	t := Table()
	var out []service.Frontend
	for _, f := range t.Frontends {
		g := f
		g.VIP = netip.MustParseAddr("fd00:96::" + f.VIP.String()[len("10.96.0."):])
		g.Backends = nil
		for _, b := range f.Backends {
			b.IP = netip.MustParseAddr("fd00:0:" + map[string]string{"flip": "192", "flap": "191"}[b.Host] + "::" + b.IP.String()[len("10.0.19x."):])
			g.Backends = append(g.Backends, b)
		}
		out = append(out, f, g)
	}
	return &service.Table{Frontends: out}
}
