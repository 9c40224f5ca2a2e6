// Package observe is cnlab's flow observability, as Hubble's: the flow
// record every datapath's source reports (eBPF's ring buffer, the NFLOG
// groups of the iptables and nftables log rules, conntrack's events for
// Service translation, the L7 proxies' access logs), the per-lab store a
// recorder writes them to, and the filters and summary `cnlab observe`
// reads them with. The JSON of a Flow is the contract of ../DESIGN.md
// ("Flow observability").
package observe

import (
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Verdicts of a flow.
const (
	Forwarded  = "forwarded"  // allowed on (a new flow, with observe: all)
	Dropped    = "dropped"    // denied
	Redirected = "redirected" // handed to the host's L7 proxy
	Translated = "translated" // a Service's frontend translated to a backend
)

// Types of a flow, as hubble observe --type names them.
const (
	TypeDrop    = "drop"    // a dropped packet
	TypeTrace   = "trace"   // a packet forwarded or redirected at a verdict point
	TypeL7      = "l7"      // an HTTP request the L7 proxy judged
	TypeService = "service" // a Service translation
)

// Flow is one observed flow event.
type Flow struct {
	Time      time.Time  `json:"time"`
	From      string     `json:"from"` // source endpoint ("ns/name"), "" outside the lab's endpoints
	To        string     `json:"to"`
	SrcIP     string     `json:"srcIP"`
	DstIP     string     `json:"dstIP"`
	Protocol  string     `json:"protocol"` // tcp, udp, icmp, or the IP protocol number
	SrcPort   uint16     `json:"srcPort"`
	DstPort   uint16     `json:"dstPort"`
	TCPFlags  string     `json:"tcpFlags,omitempty"` // "SYN", "SYN|ACK", ...
	Verdict   string     `json:"verdict"`
	Reason    string     `json:"reason"`
	Direction string     `json:"direction,omitempty"` // ingress or egress of Endpoint
	Endpoint  string     `json:"endpoint,omitempty"`  // the endpoint whose side decided
	Policy    *PolicyRef `json:"policy,omitempty"`    // absent when no policy decided
	Datapath  string     `json:"datapath"`
	Type      string     `json:"type"`
	Host      string     `json:"host"`
	Hook      string     `json:"hook,omitempty"` // where: "tc", "connect", "FORWARD", "l7-proxy", "conntrack"
	HTTP      *HTTP      `json:"http,omitempty"`
	Service   string     `json:"service,omitempty"`  // ns/name of the Service a translated flow was for
	Frontend  string     `json:"frontend,omitempty"` // its address:port before translation
	Backend   string     `json:"backend,omitempty"`  // the backend endpoint chosen
	// Labels of the source and destination endpoints, when asked for
	// (observe --labels).
	FromLabels map[string]string `json:"fromLabels,omitempty"`
	ToLabels   map[string]string `json:"toLabels,omitempty"`

	// Origin is the policy rule the source names, as the compiler's
	// origins are written ("Kind ns/name path"), before Namer turns it
	// into Policy. Not part of the record.
	Origin string `json:"-"`
}

// PolicyRef names the policy, and its rule, that decided a flow.
type PolicyRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Rule      string `json:"rule"` // the YAML path of the rule: "spec.ingress[0]"; a direction's path for its default deny
	// Of a cluster policy: its tier and priority, and the rule's action.
	Tier     string `json:"tier,omitempty"`
	Priority *int   `json:"priority,omitempty"`
	Action   string `json:"action,omitempty"`
}

// String is "Kind ns/name rule".
func (p *PolicyRef) String() string {
	key := p.Name
	if p.Namespace != "" {
		key = p.Namespace + "/" + p.Name
	}
	return strings.TrimSpace(p.Kind + " " + key + " " + p.Rule)
}

// HTTP is what an L7 flow adds: the request line and the status.
type HTTP struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Host   string `json:"host,omitempty"`
	Status int    `json:"status"`
	Micros int64  `json:"micros,omitempty"` // the time the proxy took
}

// Lost is the record of events a source could not deliver: the stream
// says how many instead of dropping them silently.
type Lost struct {
	Lost   uint64    `json:"lost"`
	Time   time.Time `json:"time"`
	Host   string    `json:"host,omitempty"`
	Source string    `json:"source,omitempty"` // "ebpf", "nflog", "conntrack", "recorder"
}

// ParseOrigin splits a compiled entry's origin ("NetworkPolicy x/allow-web
// spec.ingress[0]", "AdminNetworkPolicy deny-x spec.egress[1]") into a
// PolicyRef; nil when it is no policy's.
func ParseOrigin(origin string) *PolicyRef {
	f := strings.SplitN(strings.TrimSpace(origin), " ", 3)
	if len(f) < 2 {
		return nil
	}
	p := &PolicyRef{Kind: f[0], Name: f[1]}
	if ns, name, ok := strings.Cut(f[1], "/"); ok {
		p.Namespace, p.Name = ns, name
	}
	if len(f) == 3 {
		p.Rule = f[2]
	}
	return p
}

// ProtoName names an IP protocol as flows do.
func ProtoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 1:
		return "icmp"
	case 132:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}

// TCPFlagNames renders TCP flags as "SYN|ACK".
func TCPFlagNames(f uint8) string {
	names := []string{"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"}
	var out []string
	for i, n := range names {
		if f&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, "|")
}

// SetAddrs fills the addresses, ports and protocol of f.
func (f *Flow) SetAddrs(src, dst netip.AddrPort, proto uint8) {
	f.SrcIP, f.DstIP = src.Addr().String(), dst.Addr().String()
	f.SrcPort, f.DstPort = src.Port(), dst.Port()
	f.Protocol = ProtoName(proto)
}
