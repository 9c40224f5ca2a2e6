package results

import (
	"github.com/cnlab/cnlab/datapath/kind"
)

// Policy modes: how the matrix's number of policies is generated
// (docs/methodology.md).
const (
	ModeNoMatch    = kind.FillerNoMatch    // iptables: filler rules every packet walks; others: policies on other ports
	ModeTopOfChain = kind.FillerTopOfChain // iptables only: filler after the established-accept rule
	ModeL4Rules    = "l4-rules"            // one policy with N extra L4 port rules
	ModeSelectors  = "selectors"           // N policies, each with its own label selector for the client
	ModeTerms      = "terms"               // one CiliumNetworkPolicy whose fromEndpoints holds N more matchLabels terms (seed 003)
)

// PolicyModes are the policy modes, in the order errors list them.
var PolicyModes = []string{ModeNoMatch, ModeTopOfChain, ModeL4Rules, ModeSelectors, ModeTerms}

// Which of a point's Admin-tier cluster policies matches the measured
// flow: none of them, or the last (the highest priority number), which
// accepts it.
const (
	ClusterMatchNone = "none"
	ClusterMatchLast = "last"
)

// ClusterMatches are the places of the matching cluster policy.
var ClusterMatches = []string{ClusterMatchNone, ClusterMatchLast}

// MaxClusterPolicies is the most Admin-tier policies a point has: one
// priority each, and a cluster policy's priority is 0 to 1000.
const MaxClusterPolicies = 1000

// L7 modes: the policy an L7 point applies on the server (docs/l7.md).
const (
	L7None    = "none"     // no policy at all
	L7L4      = "l4"       // L3/L4 allow of the client on TCP 80: no proxy
	L7HTTPAny = "http-any" // rules: {http: [{}]}: every request allowed, through the proxy
	L7Rules   = "rules"    // l7Rules HTTP rules, the request's first, last or absent
)

// L7Modes are the L7 modes.
var L7Modes = []string{L7None, L7L4, L7HTTPAny, L7Rules}

// Where the rule matching the request is among a point's L7 rules.
const (
	MatchFirst  = "first"
	MatchLast   = "last"
	MatchAbsent = "absent" // no rule matches: every request gets 403
)

// L7Matches are the places of the matching L7 rule.
var L7Matches = []string{MatchFirst, MatchLast, MatchAbsent}

// L7 proxies: what enforces a proxied L7 point's rules. cnlab's own
// proxy is the default (a point's L7Proxy stays empty); HAProxy is a
// comparison series, not a datapath: it stands in the proxy's place
// behind the point's datapath (docs/l7.md, "HAProxy as the reference").
const (
	L7ProxyCnlab   = "cnlab"
	L7ProxyHAProxy = "haproxy"
)

// L7Proxies are the L7 proxies.
var L7Proxies = []string{L7ProxyCnlab, L7ProxyHAProxy}

// HAProxyLabel names HAProxy's lines and rows.
const HAProxyLabel = "HAProxy (reference)"

// Chain topologies: the chain preset and the direct pair (a chain of
// length 0); topology.PresetDirect is the same name (a test checks).
const (
	PresetChain  = "chain"
	PresetDirect = "direct"
)

// IsChain reports whether a topology value names the chain preset (or
// the direct pair, a chain of length 0).
func IsChain(t string) bool { return t == PresetChain || t == PresetDirect }

// Params are the values of one point of the matrix. Zero values are the
// defaults (the topology's own datapath, MTU and offloads).
type Params struct {
	Topology    string    `json:"topology"`
	Link        string    `json:"link,omitempty"`
	ChainLength int       `json:"chainLength,omitempty"` // chain: forwarding hops (0: client and server on one veth pair)
	Datapath    kind.Kind `json:"datapath,omitempty"`
	HostRouting string    `json:"hostRouting,omitempty"`
	Peers       string    `json:"peers,omitempty"` // iptables: addresses ("": the default) or ipsets
	// Observe is what the lab records of its flows (off, drops, all:
	// topology.Spec.Observe; "": the topology's own, off for presets).
	Observe          string `json:"observe,omitempty"`
	Policies         int    `json:"policies"`
	PolicyMode       string `json:"policyMode,omitempty"`
	Flows            int    `json:"flows,omitempty"`
	Size             int    `json:"size,omitempty"`
	MTU              int    `json:"mtu,omitempty"`
	Offloads         string `json:"offloads,omitempty"`
	Zerocopy         bool   `json:"zerocopy,omitempty"`
	FirewallRules    int    `json:"firewallRules,omitempty"`
	FirewallStateful bool   `json:"firewallStateful,omitempty"`
	FirewallSpread   bool   `json:"firewallSpread,omitempty"`
	ShaperRate       string `json:"shaperRate,omitempty"`
	ShaperDirection  string `json:"shaperDirection,omitempty"` // "" is the topology's default (server)
	Switches         int    `json:"switches,omitempty"`        // link ovs: bridges in series per segment (0: the default, 1)
	SwitchLink       string `json:"switchLink,omitempty"`      // between them: patch or veth
	// Services is the number of Services installed at the point (0:
	// none, the workloads connect to the server's own address), served by
	// ServiceProxy; ServiceBackends is the backends of each Service but
	// the measured one, ServicePosition where the measured one is.
	Services        int        `json:"services,omitempty"`
	ServiceProxy    kind.Proxy `json:"serviceProxy,omitempty"`
	ServiceBackends int        `json:"serviceBackends,omitempty"`
	ServicePosition string     `json:"servicePosition,omitempty"`
	// SocketLB: the eBPF datapath translates connections to Services at
	// the socket too (ebpf.socketLB).
	SocketLB bool `json:"socketLB,omitempty"`
	// L7Mode is the policy of an L7 point (l7.go); with rules, L7Rules
	// HTTP rules with the request's matching rule at L7Match.
	L7Mode  string `json:"l7Mode,omitempty"`
	L7Rules int    `json:"l7Rules,omitempty"`
	L7Match string `json:"l7Match,omitempty"`
	// L7Proxy is what enforces a proxied L7 point's rules: "" cnlab's
	// proxy (l7Proxy: cnlab), L7ProxyHAProxy HAProxy in its place.
	L7Proxy string `json:"l7Proxy,omitempty"`
	// ClusterPolicies is the number of Admin-tier ClusterNetworkPolicies
	// in front of the measured flow (with one Baseline one behind them
	// when any), ClusterPolicyMatch whether none of them matches the flow
	// or the last accepts it (experiment/clusterpolicies.go).
	ClusterPolicies    int    `json:"clusterPolicies,omitempty"`
	ClusterPolicyMatch string `json:"clusterPolicyMatch,omitempty"`
	// Placement (same-node, cross-node) and Network (pod, host): the
	// kubernetes backend's axes ("": as the topology places them, pod).
	Placement string `json:"placement,omitempty"`
	Network   string `json:"network,omitempty"`
	// IPFamily is the address family the workloads use, 4 or 6 (0: the
	// lab's primary family). With it a preset lab is built dual-stack
	// (topology.PresetOptions.DualStack), a topology file must give the
	// hosts a prefix of the family, and the workloads connect to the
	// server's address of the family.
	IPFamily int `json:"ipFamily,omitempty"`
}

// Point is one measurement of the experiment: parameters and a workload.
type Point struct {
	ID       string   `json:"id"`
	Sweep    string   `json:"sweep,omitempty"`
	Params   Params   `json:"params"`
	Workload Workload `json:"workload"`
	Series   string   `json:"series"` // the line a figure draws this point on
	Profile  bool     `json:"profile,omitempty"`
	// Repetitions is the number of measured samples the point gets (with
	// a precision target, the least it gets).
	Repetitions int        `json:"repetitions"`
	Precision   *Precision `json:"precision,omitempty"`
}
