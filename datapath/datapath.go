// Package datapath defines what a policy datapath does — set a lab's hosts
// up, enforce compiled policy incrementally and atomically, describe its
// kernel state — the Descriptor that binds a kind (datapath/kind) to an
// implementation, and the helpers the implementations share (L7 redirects,
// bound ports); what they share with the service proxies (per-host state,
// the atomic multi-host apply) is internal/change. The list of implementations is
// datapath/registry. Datapaths consume the policy IR only: they never read
// policy YAML. Each host of a lab enforces its own endpoints' egress and
// ingress.
package datapath

import (
	"context"
	"net/netip"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Datapath enforces a lab's compiled policy.
type Datapath interface {
	// Setup prepares every host of the lab (sysctls, base chains or
	// tables) and attaches every endpoint. It is idempotent.
	Setup(ctx context.Context, lab *topology.Spec) error
	// Apply makes each host enforce c, changing only what differs from
	// the previous Apply, in one atomic transaction per host: a flow that
	// both the old and the new policy deny never passes in between.
	Apply(ctx context.Context, lab *topology.Spec, c *policy.Compiled) error
	// Describe returns the kernel state of the datapath, per host name.
	Describe(ctx context.Context, lab *topology.Spec) (map[string]string, error)
}

// FlowForgetter is a datapath with its own connection tracking (eBPF): the
// probe asks it to forget the probe's own flows, as it does the kernel's
// conntrack.
type FlowForgetter interface {
	ForgetFlows(ctx context.Context, lab *topology.Spec, proto uint8, srcs []netip.AddrPort) error
}

// Descriptor binds a datapath kind to its implementation. Each
// implementation package exports one; datapath/registry lists them. What a
// kind is, needs and accepts without the kernel is in datapath/kind.
type Descriptor struct {
	Kind kind.Kind
	New  func() Datapath
	// Labs lists the labs that have state of this datapath outside their
	// namespaces (eBPF pins in bpffs), found from the kernel; nil when the
	// datapath keeps everything inside the lab's namespaces.
	Labs func() []string
	// Cleanup removes that state for one lab; idempotent. Called once the
	// lab's namespaces are gone.
	Cleanup func(lab string) error
}

// ErrNoHosts is returned for labs without hosts (chains): there is nothing
// to enforce policies on (change.ErrNoHosts, which proxies return too).
var ErrNoHosts = change.ErrNoHosts

// RuleCounter is what a datapath counted for one policy rule of one
// endpoint and direction on one host: the packets the rule decided (new
// flows it allowed, packets it dropped; established traffic passes by
// conntrack, before any rule), like iptables -v.
type RuleCounter struct {
	Host      string `json:"host"`
	Endpoint  string `json:"endpoint,omitempty"`  // the endpoint whose rule it is, when the datapath knows
	Direction string `json:"direction,omitempty"` // ingress or egress
	// Rule is the compiled entry's origin ("Kind ns/name path"), or
	// DefaultDenyRule for an isolated endpoint's drop of what no rule
	// allowed.
	Rule    string `json:"rule"`
	Verdict string `json:"verdict"` // allow, deny, pass or default-deny
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// DefaultDenyRule is RuleCounter.Rule of an isolated endpoint's default
// deny.
const DefaultDenyRule = "default-deny"

// RuleCounterer is a datapath that counts per policy rule.
type RuleCounterer interface {
	RuleCounters(ctx context.Context, lab *topology.Spec) ([]RuleCounter, error)
}
