package observe

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// NFLOGGroup is the netlink log group the iptables and nftables datapaths'
// log rules send to, in each host's namespace (nfnetlink_log's groups are
// per network namespace), and the recorder listens on.
const NFLOGGroup = 7420

// The log rules of the netfilter datapaths carry a compact prefix that
// maps back to the policy: "cnlab V D ID", where V is the verdict the
// rule's verdict point gives (F forwarded, D dropped, R redirected to the
// L7 proxy), D the direction of the endpoint whose chain it is (I
// ingress, E egress, - none), and ID the rule: RuleID of the compiled
// entry's origin, "-" where no rule decided (an isolated endpoint's
// default deny, a flow no policy isolates), or a reason word ("invalid"
// for conntrack's invalid state) starting with a letter past f.
const prefixTag = "cnlab"

// LogPrefix builds a log rule's prefix.
func LogPrefix(verdict string, ingress bool, dirKnown bool, id string) string {
	v := map[string]string{Forwarded: "F", Dropped: "D", Redirected: "R"}[verdict]
	d := "-"
	if dirKnown {
		d = "E"
		if ingress {
			d = "I"
		}
	}
	if id == "" {
		id = "-"
	}
	return fmt.Sprintf("%s %s %s %s", prefixTag, v, d, id)
}

// Prefix is a parsed log prefix.
type Prefix struct {
	Verdict   string
	Direction string // "ingress", "egress" or ""
	ID        string // RuleID, "-", or a reason word
}

// ParsePrefix reads a log rule's prefix; ok is false for a prefix that is
// not cnlab's.
func ParsePrefix(s string) (Prefix, bool) {
	f := strings.Fields(strings.TrimRight(s, "\x00 "))
	if len(f) != 4 || f[0] != prefixTag {
		return Prefix{}, false
	}
	p := Prefix{ID: f[3]}
	switch f[1] {
	case "F":
		p.Verdict = Forwarded
	case "D":
		p.Verdict = Dropped
	case "R":
		p.Verdict = Redirected
	default:
		return Prefix{}, false
	}
	switch f[2] {
	case "I":
		p.Direction = "ingress"
	case "E":
		p.Direction = "egress"
	case "-":
	default:
		return Prefix{}, false
	}
	return p, true
}

// RuleID is the compact id of a compiled entry's origin in log prefixes:
// 8 hex digits of its FNV-1a hash (the eBPF datapath's RuleRef, in hex).
func RuleID(origin string) string {
	h := fnv.New32a()
	h.Write([]byte(origin))
	return fmt.Sprintf("%08x", h.Sum32())
}
