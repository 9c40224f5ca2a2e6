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
