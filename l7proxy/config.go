// Package l7proxy is cnlab's L7 HTTP proxy: one process per host of a lab
// (in the host's network namespace) that the datapaths send connections
// to L7 ports to, which judges every request against the CiliumNetworkPolicy
// http rules of its source and destination, answers 403 "Access denied" to
// a request they do not allow, and forwards the others to the original
// destination. This file is its configuration, built from the policy IR;
// proxy.go is the proxy; control.go talks to a running one. Package
// l7proxy/deploy builds each host's configuration from the policy IR,
// starts the proxies and pushes configurations to them.
package l7proxy

import (
	"net/netip"
	"time"

	"github.com/cnlab/cnlab/l7"
)

// Port is the port the proxy listens on in its host's namespace.
const Port = 15001

// Mark is the SO_MARK of every socket of the proxy (its listener, so the
// connections it accepts, and its connections upstream): the eBPF
// datapath lets what the proxy sends through to an endpoint by it
// (MARK_FROM_PROXY of datapath/ebpf/bpf/cnlab.c). The netfilter
// datapaths do not look at it.
const Mark = 0xa00

// Config is what one host's proxy enforces.
type Config struct {
	Lab  string `json:"lab"`
	Host string `json:"host"`
	// Set is the digest of the policy set it comes from.
	Set string `json:"set"`
	// Identities maps every endpoint address of the lab to its identity:
	// what the proxy knows a source by.
	Identities map[netip.Addr]uint32 `json:"identities"`
	// Ports are the L7 ports of the host's endpoints.
	Ports []PortConfig `json:"ports"`
	// L4 is the L3/L4 policy of the TCP connections the proxy may hold
	// open: it judges a connection to a port that stopped being an L7
	// port (nil: it allows none).
	L4 *L4Policy `json:"l4,omitempty"`
	// Limits bound what one client connection may cost (zero fields:
	// the defaults, DefaultLimits).
	Limits Limits `json:"limits,omitzero"`
}

// Limits bound what the proxy spends on a client, so that a slow or
// hostile client costs bounded memory and never delays another's
// requests (docs/l7.md, "Limits"). Its fields are topology.L7Limits'
// (the lab's l7Proxy key), which converts to it; this package cannot
// import topology (test helpers of topology's tests import it).
type Limits struct {
	MaxHeaderBytes int           `json:"maxHeaderBytes,omitempty"` // request line and header (431 beyond)
	MaxHeaders     int           `json:"maxHeaders,omitempty"`     // header lines (431 beyond)
	HeaderTimeout  time.Duration `json:"headerTimeout,omitempty"`  // from a request's first byte to its head's end
	IdleTimeout    time.Duration `json:"idleTimeout,omitempty"`    // keep-alive with no request, a body with nothing more
	WriteTimeout   time.Duration `json:"writeTimeout,omitempty"`   // a client not taking its answer
	MaxConnections int           `json:"maxConnections,omitempty"` // client connections open at once
	Threads        int           `json:"threads,omitempty"`        // threads running Go code at once (GOMAXPROCS)
}

// DefaultLimits are the limits a configuration leaves zero: Envoy's
// defaults for the header (60 KiB, 100 lines), Go's server's 30 s for
// the head (the proxy's before these limits), 5 minutes idle (before),
// 60 s to take an answer, 16,384 connections, one thread (measured:
// less CPU per request than two on the 2-vCPU VM, and no slower with ten
// clients; BENCHMARKS.md, "L7 HTTP policy").
var DefaultLimits = Limits{
	MaxHeaderBytes: 60 << 10,
	MaxHeaders:     100,
	HeaderTimeout:  30 * time.Second,
	IdleTimeout:    5 * time.Minute,
	WriteTimeout:   60 * time.Second,
	MaxConnections: 16384,
	Threads:        1,
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	for _, f := range []struct{ v, def *int }{{&l.MaxHeaderBytes, &d.MaxHeaderBytes}, {&l.MaxHeaders, &d.MaxHeaders}, {&l.MaxConnections, &d.MaxConnections}, {&l.Threads, &d.Threads}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *time.Duration }{{&l.HeaderTimeout, &d.HeaderTimeout}, {&l.IdleTimeout, &d.IdleTimeout}, {&l.WriteTimeout, &d.WriteTimeout}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return l
}

// L4Policy is the part of the policy IR (package policy: Compiled's
// Enforced and Rules) that decides, at L3/L4, a TCP connection to an
// endpoint of the host: the ingress entries of the host's endpoints'
// identities, the egress entries of every identity (a source may be
// anywhere), and which directions each enforces. (Its own types: this
// package is imported by test helpers of packages that policy imports.)
type L4Policy struct {
	Enforced map[uint32]L4Enforced `json:"enforced"`
	Rules    []L4Entry             `json:"rules"`
}

// L4Enforced says whether an identity is isolated in each direction
// (policy.Enforcement).
type L4Enforced struct {
	Ingress bool `json:"ingress"`
	Egress  bool `json:"egress"`
}

// L4Entry is one TCP or any-protocol entry of the IR (policy.Entry).
type L4Entry struct {
	Subject  uint32       `json:"subject"`
	Egress   bool         `json:"egress,omitempty"` // else ingress
	Deny     bool         `json:"deny,omitempty"`
	PeerID   uint32       `json:"peerIdentity,omitempty"` // 0 with no PeerCIDR: any peer
	PeerCIDR netip.Prefix `json:"peerCIDR,omitzero"`
	AnyProto bool         `json:"anyProto,omitempty"` // else TCP
	PortLo   uint16       `json:"portLo,omitempty"`   // 0: any port
	PortHi   uint16       `json:"portHi,omitempty"`
	// Tier is the entry's cluster tier (policy.Tier: 1 Admin, 3
	// Baseline; 0 or 2 the NetworkPolicy tier), Pass an Admin-tier Pass.
	// Rules hold each subject's entries in the IR's walking order.
	Tier uint8 `json:"tier,omitempty"`
	Pass bool  `json:"pass,omitempty"`
}

// Tiers as policy numbers them (this package cannot import policy).
const (
	tierAdmin    = 1
	tierBaseline = 3
)

// Allows evaluates a new TCP connection from src to dst as
// policy.Compiled.Allows does, ids giving the identity of an endpoint
// address (0 for an address that is no endpoint's).
func (l *L4Policy) Allows(ids map[netip.Addr]uint32, src, dst netip.AddrPort) bool {
	if l == nil {
		return false
	}
	return l.side(ids, ids[src.Addr()], true, dst.Addr(), dst.Port()) &&
		l.side(ids, ids[dst.Addr()], false, src.Addr(), dst.Port())
}

// side walks one side's entries as policy.DecideSide does: the Admin
// tier's first match decides (a Pass skips to the NetworkPolicy tier),
// then a NetworkPolicy-tier deny drops and an allow accepts, an isolated
// subject's other connections drop, then the Baseline tier's first match
// decides; nothing matching allows. (TestL4AgreesWithIR checks it
// against the IR on every scenario, the tiers' included.)
func (l *L4Policy) side(ids map[netip.Addr]uint32, subject uint32, egress bool, remote netip.Addr, port uint16) bool {
	enf := l.Enforced[subject]
	enforced := (!egress && enf.Ingress) || (egress && enf.Egress)
	allowed, passed := false, false
	for _, r := range l.Rules {
		if r.Subject != subject || r.Egress != egress {
			continue
		}
		if r.Tier == tierAdmin && passed {
			continue
		}
		if r.Tier == tierBaseline && (allowed || enforced) {
			break
		}
		if !r.matches(ids, remote, port) {
			continue
		}
		switch r.Tier {
		case tierAdmin:
			if r.Pass {
				passed = true
				continue
			}
			return !r.Deny
		case tierBaseline:
			return !r.Deny
		}
		if r.Deny {
			return false
		}
		allowed = true
	}
	return allowed || !enforced
}

func (r L4Entry) matches(ids map[netip.Addr]uint32, remote netip.Addr, port uint16) bool {
	switch {
	case r.PeerCIDR.IsValid():
		if !r.PeerCIDR.Contains(remote) {
			return false
		}
	case r.PeerID != 0:
		if ids[remote] != r.PeerID {
			return false
		}
	}
	return r.AnyProto || r.PortLo == 0 || (port >= r.PortLo && port <= r.PortHi)
}

// PortConfig holds the rules of one L7 port of one endpoint.
type PortConfig struct {
	Endpoint string     `json:"endpoint"`
	Addr     netip.Addr `json:"addr"`
	Port     uint16     `json:"port"`
	// Peers are the rules per source: an endpoint identity, or (CIDR set)
	// the addresses of that prefix that are no endpoint's.
	Peers []PeerConfig `json:"peers"`
}

// PeerConfig is the rules one kind of source gets on a port; the rules of
// every peer that covers a source add up.
type PeerConfig struct {
	Identity uint32 `json:"identity,omitempty"`
	// Addr, when set, is one endpoint whose rules differ from those of
	// the rest of its identity (a CIDR rule covers some of them only).
	Addr  netip.Addr   `json:"addr,omitzero"`
	CIDR  netip.Prefix `json:"cidr,omitzero"`
	Rules []l7.Rule    `json:"rules"`
}
