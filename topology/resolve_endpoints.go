package topology

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"

	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/labels"
)

func (r *resolver) endpoints() error {
	if r.spec.Chain != nil {
		return nil
	}
	s := r.spec
	seen := map[string]int{}
	taken := map[netip.Addr]string{}
	vethTaken := map[string]bool{}
	before := len(r.errs)
	r.each(len(r.raw.Endpoints), func(i int) error { return r.endpoint(i, seen, taken, vethTaken) })
	if len(r.errs) > before {
		return nil // the file is refused: no addresses to allocate
	}
	// Allocate the remaining addresses in file order, after every fixed one
	// is known.
	next := map[string]netip.Addr{}
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		host := s.Host(ep.Host)
		for k, c := range host.PodCIDRs {
			if ep.IPs[k].IsValid() {
				continue
			}
			key := fmt.Sprintf("%s/%d", host.Name, k)
			a, ok := next[key]
			if !ok {
				a = host.Gateways[k].Next()
			}
			for usable(c, a) && taken[a] != "" {
				a = a.Next()
			}
			if !usable(c, a) {
				return r.errf(fmt.Sprintf("endpoints[%d]", i), "host %s's podCIDR %s has no free address left (%d usable, %s on it)",
					host.Name, c, usableCount(c), plural.N(r.countOn(host.Name), "endpoint"))
			}
			ep.IPs[k] = a
			taken[a] = ep.ID()
			next[key] = a.Next()
		}
		ep.IP = ep.IPs[0]
	}
	r.bridges()
	return nil
}

// endpoint resolves endpoints[i]; seen maps the IDs before it to their
// index, taken the fixed addresses to their endpoint, vethTaken the host
// veths' names.
func (r *resolver) endpoint(i int, seen map[string]int, taken map[netip.Addr]string, vethTaken map[string]bool) error {
	raw := r.raw.Endpoints[i]
	s := r.spec
	if r.badHosts[raw.Host] || r.badNamespaces[raw.Namespace] {
		return errSkip // declared wrongly: said already
	}
	path := fmt.Sprintf("endpoints[%d]", i)
	if err := labels.CheckDNSLabel(raw.Name, 63); err != nil {
		return r.errf(path+".name", "%v", err)
	}
	ns := raw.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if _, ok := s.Namespaces[ns]; !ok {
		return r.errf(path+".namespace", "unknown namespace %q (declare it under namespaces:)", ns)
	}
	id := ns + "/" + raw.Name
	if j, dup := seen[id]; dup {
		return r.errf(path+".name", "duplicate endpoint %s (also endpoints[%d])", id, j)
	}
	seen[id] = i
	hostName := raw.Host
	if hostName == "" {
		if len(s.Hosts) != 1 {
			return r.errf(path+".host", "is required when the lab has several hosts (%s)", strings.Join(r.hostNames(), ", "))
		}
		hostName = s.Hosts[0].Name
	}
	host := s.Host(hostName)
	if host == nil {
		return r.errf(path+".host", "unknown host %q (hosts: %s)", hostName, strings.Join(r.hostNames(), ", "))
	}
	ls := map[string]string{}
	for k, v := range raw.Labels {
		ls[k] = v
	}
	if err := labels.CheckSet(ls); err != nil {
		return r.errf(path+".labels", "%v", err)
	}
	ports, err := r.ports(path, raw.Ports)
	if err != nil {
		return err
	}
	ep := Endpoint{
		Name: raw.Name, Namespace: ns, Host: hostName,
		Prefix: host.PodCIDR.Bits(), Gateway: host.Gateway,
		Labels: ls, Ports: ports,
		Netns:    EndpointNetns(s.Name, ns, raw.Name),
		HostVeth: hostVethName(id, vethTaken),
	}
	ep.IPs = make([]netip.Addr, len(host.PodCIDRs))
	if len(raw.IP) > len(host.PodCIDRs) {
		return r.errf(path+".ip", "has %d addresses but host %s has %d podCIDR(s): give at most one address per family", len(raw.IP), hostName, len(host.PodCIDRs))
	}
	for k, s := range raw.IP {
		at := path + ".ip"
		if len(raw.IP) > 1 {
			at = fmt.Sprintf("%s[%d]", at, k)
		}
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Zone() != "" || ip.Is4In6() {
			return r.errf(at, "%q is not an IPv4 or IPv6 address", s)
		}
		c, ok := host.CIDR(Family(ip))
		if !ok {
			return r.errf(at, "%s is IPv%d but host %s's podCIDRs are %s", ip, Family(ip), hostName, familiesOf(host.PodCIDRs))
		}
		what := "the first address is the bridge, the last is broadcast"
		if ip.Is6() {
			what = "the first address is the subnet's, the second the bridge's"
		}
		if !usable(c, ip) {
			return r.errf(at, "%s is not a usable address of host %s's podCIDR %s (%s)", ip, hostName, c, what)
		}
		if other, dup := taken[ip]; dup {
			return r.errf(at, "%s is already taken by %s", ip, other)
		}
		for j, pc := range host.PodCIDRs {
			if pc == c {
				if ep.IPs[j].IsValid() {
					return r.errf(at, "two IPv%d addresses: give one per family", Family(ip))
				}
				ep.IPs[j] = ip
			}
		}
		taken[ip] = id
	}
	s.Endpoints = append(s.Endpoints, ep)
	return nil
}

// bridges puts each host's endpoints, in file order, on its bridge and
// then on leaf bridges, EndpointsPerBridge to a bridge.
func (r *resolver) bridges() {
	s := r.spec
	on := map[string]int{}
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		k := on[ep.Host] / bridgeEndpoints
		on[ep.Host]++
		if k == 0 {
			continue
		}
		ep.Bridge = LeafBridge(k)
		if h := s.Host(ep.Host); len(h.Leaves) < k {
			h.Leaves = append(h.Leaves, ep.Bridge)
		}
	}
}

func (r *resolver) countOn(host string) int {
	n := 0
	for _, e := range r.spec.Endpoints {
		if e.Host == host {
			n++
		}
	}
	return n
}

func (r *resolver) ports(path string, raw []rawPort) ([]Port, error) {
	var out []Port
	names := map[string]int{}
	nums := map[string]int{}
	for i, p := range raw {
		pp := fmt.Sprintf("%s.ports[%d]", path, i)
		if p.Name != "" {
			if err := labels.CheckPortName(p.Name); err != nil {
				return nil, r.errf(pp+".name", "%v", err)
			}
			if j, dup := names[p.Name]; dup {
				return nil, r.errf(pp+".name", "duplicate port name %q (also ports[%d])", p.Name, j)
			}
			names[p.Name] = i
		}
		if p.Port < 1 || p.Port > 65535 {
			return nil, r.errf(pp+".port", "%d is not a port number (1-65535)", p.Port)
		}
		proto := p.Protocol
		if proto == "" {
			proto = "TCP"
		}
		if proto != "TCP" && proto != "UDP" && proto != "SCTP" {
			return nil, r.errf(pp+".protocol", "unknown protocol %q (TCP, UDP or SCTP)", p.Protocol)
		}
		key := fmt.Sprintf("%d/%s", p.Port, proto)
		if j, dup := nums[key]; dup {
			return nil, r.errf(pp+".port", "%s is declared twice (also ports[%d])", key, j)
		}
		nums[key] = i
		out = append(out, Port{Name: p.Name, Port: p.Port, Protocol: proto})
	}
	return out, nil
}

// hostVethName names an endpoint's host-side veth "lxc" + 8 hex digits of a
// hash of its ID, as Cilium does; a clash within the lab is resolved by
// rehashing deterministically.
func hostVethName(id string, taken map[string]bool) string {
	for salt := 0; ; salt++ {
		h := fnv.New32a()
		fmt.Fprintf(h, "%s#%d", id, salt)
		name := fmt.Sprintf("lxc%08x", h.Sum32())
		if !taken[name] {
			taken[name] = true
			return name
		}
	}
}
