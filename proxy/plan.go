package proxy

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cnlab/cnlab/service"
)

// MasqMark is the packet mark bit the netfilter proxies set on a
// connection that must leave its host masqueraded (a hairpin, a node port
// under externalTrafficPolicy Cluster), as kube-proxy's masqueradeBit 14
// does. No policy datapath of cnlab uses packet marks.
const MasqMark = 0x4000

// HostFrontend is a frontend as one host translates it: the backends a
// connection to its cluster IP from that host's endpoints may reach, and
// for a NodePort those a connection to the host's node port may reach.
type HostFrontend struct {
	*service.Frontend
	// ID names the frontend uniquely in a table: key, protocol and port
	// ("x/web:http/tcp/80"). Chain names hash it.
	ID      string
	Cluster []service.Backend
	// External are the node port's backends (all of them, or with
	// ExternalLocal those on the host); nil without a node port.
	External []service.Backend
}

// SameSets reports whether the node port balances over the cluster IP's
// own backends, so that both can share one balancing chain.
func (f *HostFrontend) SameSets() bool {
	return slices.Equal(f.Cluster, f.External)
}

// Plan returns what host translates for t, in the table's order.
func Plan(t *service.Table, host string) []HostFrontend {
	var out []HostFrontend
	for i := range t.Frontends {
		f := &t.Frontends[i]
		hf := HostFrontend{Frontend: f, ID: FrontendID(f), Cluster: f.For(host)}
		if f.NodePort != 0 {
			hf.External = f.Backends
			if f.ExternalLocal {
				hf.External = nil
				for _, b := range f.Backends {
					if b.Host == host {
						hf.External = append(hf.External, b)
					}
				}
			}
		}
		out = append(out, hf)
	}
	return out
}

// FrontendID names a frontend uniquely: "namespace/name:port/proto/port".
func FrontendID(f *service.Frontend) string {
	return fmt.Sprintf("%s/%s/%d", f.Key(), f.Protocol, f.Port)
}

// Hash returns the first n characters of the base32 SHA-256 of s, for
// chain names (kube-proxy names its chains the same way).
func Hash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:n]
}

// Digest names a table's content, for the record of what each host
// enforces: a SHA-256 of every field of every frontend and backend,
// written field by field (a JSON encoding of 10,000 Services took longer
// than the eBPF proxy's whole update). TestDigestCoversEveryField changes
// each field in turn.
func Digest(t *service.Table) string {
	h := sha256.New()
	var b []byte
	str := func(s string) { b = append(b, s...); b = append(b, 0) }
	addr := func(a netip.Addr) { x := a.As16(); b = append(b, x[:]...); b = append(b, byte(a.BitLen())) }
	flag := func(v bool) {
		if v {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	for i := range t.Frontends {
		f := &t.Frontends[i]
		b = b[:0]
		str(f.Service)
		str(f.PortName)
		str(f.Protocol)
		addr(f.VIP)
		b = binary.BigEndian.AppendUint16(b, f.Port)
		b = binary.BigEndian.AppendUint16(b, f.NodePort)
		b = binary.BigEndian.AppendUint64(b, uint64(f.Affinity))
		flag(f.InternalLocal)
		flag(f.ExternalLocal)
		b = binary.BigEndian.AppendUint32(b, uint32(len(f.Backends)))
		for _, be := range f.Backends {
			str(be.Endpoint)
			str(be.Host)
			addr(be.IP)
			b = binary.BigEndian.AppendUint16(b, be.Port)
		}
		h.Write(b)
	}
	return "svc-" + base32.StdEncoding.EncodeToString(h.Sum(nil))[:16]
}

// UDPFrontend is what a host translates for one UDP frontend, kept in
// the proxies' state so that the next apply knows which conntrack entries
// went stale.
type UDPFrontend struct {
	VIP      netip.Addr       `json:"vip"`
	Port     uint16           `json:"port"`
	NodePort uint16           `json:"nodePort,omitempty"`
	Backends []netip.AddrPort `json:"backends"` // cluster and node port backends together
}

// UDPFrontends lists the UDP frontends of a host's plan.
func UDPFrontends(plan []HostFrontend) []UDPFrontend {
	var out []UDPFrontend
	for _, f := range plan {
		if f.Protocol != "udp" {
			continue
		}
		u := UDPFrontend{VIP: f.VIP, Port: f.Port, NodePort: f.NodePort}
		for _, b := range append(slices.Clone(f.Cluster), f.External...) {
			if !slices.Contains(u.Backends, b.AddrPort()) {
				u.Backends = append(u.Backends, b.AddrPort())
			}
		}
		out = append(out, u)
	}
	return out
}

// StaleFlow selects UDP conntrack entries to delete: those whose original
// destination is Dst (a cluster IP, or with an invalid address any
// address of the host) and port DstPort, and, when Backend is valid,
// whose reply comes from Backend (the connection was translated to it).
type StaleFlow struct {
	Dst     netip.Addr
	DstPort uint16
	Backend netip.Addr
}

// StaleUDP returns the UDP flows a change from have to want leaves
// pointing where they must not, as kube-proxy's CleanStaleEntries finds
// them: flows translated to a backend the frontend no longer has, and
// flows to a frontend that had no backend (not translated, so rejected)
// and now has some.
func StaleUDP(have, want []UDPFrontend) []StaleFlow {
	var out []StaleFlow
	find := func(list []UDPFrontend, u UDPFrontend) *UDPFrontend {
		for i := range list {
			if list[i].VIP == u.VIP && list[i].Port == u.Port && list[i].NodePort == u.NodePort {
				return &list[i]
			}
		}
		return nil
	}
	for _, h := range have {
		w := find(want, h)
		for _, b := range h.Backends {
			if w != nil && slices.Contains(w.Backends, b) {
				continue
			}
			out = append(out, StaleFlow{Dst: h.VIP, DstPort: h.Port, Backend: b.Addr()})
			if h.NodePort != 0 {
				out = append(out, StaleFlow{DstPort: h.NodePort, Backend: b.Addr()})
			}
		}
	}
	for _, w := range want {
		h := find(have, w)
		if len(w.Backends) > 0 && (h == nil || len(h.Backends) == 0) {
			out = append(out, StaleFlow{Dst: w.VIP, DstPort: w.Port})
			if w.NodePort != 0 {
				out = append(out, StaleFlow{DstPort: w.NodePort})
			}
		}
	}
	return out
}

// ChangedRange returns the lengths of the longest common head and tail of
// two frontend lists (as same compares them, not overlapping): what lies
// between is what a change from a to b changes.
func ChangedRange(a, b []service.Frontend, same func(a, b *service.Frontend) bool) (head, tail int) {
	for head < len(a) && head < len(b) && same(&a[head], &b[head]) {
		head++
	}
	for tail < len(a)-head && tail < len(b)-head && same(&a[len(a)-1-tail], &b[len(b)-1-tail]) {
		tail++
	}
	return head, tail
}
