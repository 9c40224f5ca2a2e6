// Package service reads Kubernetes Services and EndpointSlices as users
// write them for a cluster, resolves them against a lab (cluster IPs
// allocated from the lab's service CIDR, slices synthesized from its
// endpoints for selector Services, user-written slices merged), and gives
// the service proxies their input, the Table, and the probe its oracle,
// the Model. Like policy, it is pure logic: it never touches the kernel.
package service

import (
	"net/netip"
)

// DefaultCIDR is the service CIDR of a lab whose file names none, as
// kubeadm's default.
const DefaultCIDR = "10.96.0.0/16"

// DefaultCIDR6 is the IPv6 service CIDR of a lab with IPv6 whose file
// names none (topology.DefaultServiceCIDR6).
const DefaultCIDR6 = "fd00:96::/108"

// Table is what the service proxies render: every proxied frontend of a
// lab, with the backends each may send a new connection to. It is the IR
// between the service model and the kernel, as policy.Compiled is for
// policies: proxies read nothing else. Frontends are sorted by service,
// then port name, then protocol, so the same services always render the
// same rules in the same order.
type Table struct {
	Frontends []Frontend `json:"frontends"`
}

// Frontend is one port of one Service: a virtual address (and for a
// NodePort Service, a port on every host) that new connections are
// balanced from.
type Frontend struct {
	Service  string     `json:"service"`            // namespace/name
	PortName string     `json:"portName,omitempty"` // the Service port's name ("" when it has one port without a name)
	Protocol string     `json:"protocol"`           // tcp or udp
	VIP      netip.Addr `json:"vip"`                // the cluster IP
	Port     uint16     `json:"port"`               // the Service port
	NodePort uint16     `json:"nodePort,omitempty"` // 0 unless type NodePort
	// Affinity is sessionAffinity ClientIP's timeout in seconds, 0 for
	// none: a client's new connections go to the backend its last one
	// went to while that was less than Affinity seconds ago.
	Affinity int `json:"affinitySeconds,omitempty"`
	// InternalLocal is internalTrafficPolicy Local: a client reaches only
	// the backends on its own host (none there: the connection is
	// dropped, as kube-proxy does).
	InternalLocal bool `json:"internalLocal,omitempty"`
	// ExternalLocal is externalTrafficPolicy Local for a NodePort: a
	// connection to a host's node port reaches only that host's backends,
	// and keeps its source address (no masquerade).
	ExternalLocal bool `json:"externalLocal,omitempty"`
	// Backends are the addresses a new connection may be sent to, sorted
	// by address then port: the ready endpoints carrying this port, or
	// when none is ready the serving ones (terminating included), as
	// kube-proxy picks them. Empty: new connections are rejected.
	Backends []Backend `json:"backends"`
}

// Key names the frontend in messages and chain comments:
// "namespace/name:port" ("namespace/name" when the port has no name).
func (f *Frontend) Key() string {
	if f.PortName == "" {
		return f.Service
	}
	return f.Service + ":" + f.PortName
}

// Backend is one destination of a frontend, after translation.
type Backend struct {
	// Endpoint is the lab endpoint that has the address (namespace/name),
	// "" for an address a user-written slice gives that no endpoint has.
	Endpoint string     `json:"endpoint,omitempty"`
	Host     string     `json:"host,omitempty"` // the endpoint's host (the slice's nodeName otherwise)
	IP       netip.Addr `json:"ip"`
	Port     uint16     `json:"port"` // the target port, resolved for this backend
}

// Family is the frontend's IP family, its cluster IP's: 4 or 6.
func (f *Frontend) Family() int {
	if f.VIP.Is6() {
		return 6
	}
	return 4
}

// AddrPort is the backend's translated destination.
func (b Backend) AddrPort() netip.AddrPort { return netip.AddrPortFrom(b.IP, b.Port) }

// For returns the backends a new connection from a client on host may be
// sent to: all of them, or with InternalLocal only those on host.
func (f *Frontend) For(host string) []Backend {
	if !f.InternalLocal {
		return f.Backends
	}
	var out []Backend
	for _, b := range f.Backends {
		if b.Host == host {
			out = append(out, b)
		}
	}
	return out
}
