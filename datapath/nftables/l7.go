package nftables

import (
	"fmt"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// The L7 chains of the table, made the first time a host has an L7 port:
// l7 (nat prerouting) redirects new connections to L7 ports to the host's
// proxy, carrying the whole L3/L4 decision since redirected connections
// skip the forward chain (datapath.L7Redirects); l7fwd (forward, before
// the forward chain) drops a new connection to an L7 port that was not
// redirected, but first lets those an Admin-tier allow decided (final,
// never proxied) on to the forward chain. Both are rewritten whole in the transaction of the change.
const (
	l7Chain    = "l7"
	l7FwdChain = "l7fwd"
)

// renderL7 returns the rules of the l7 and l7fwd chains of one host.
func renderL7(lab *topology.Spec, host string, c *policy.Compiled) (nat, fwd []string) {
	l := layout{observe: lab.ObserveLevel()}
	for _, m := range datapath.L7Redirects(lab, host, c) {
		ip := "ip"
		if topology.Family(m.Dst) == 6 {
			ip = "ip6"
		}
		r := fmt.Sprintf("%s daddr %s tcp dport %d", ip, m.Dst, m.Port)
		if m.Src.IsValid() {
			r = fmt.Sprintf("%s saddr %s %s", ip, m.Src, r)
		}
		verdict := "return"
		if m.Redirect {
			verdict = l.log(observe.Redirected, true, true, m.RuleID()) + fmt.Sprintf("redirect to :%d", l7proxy.Port)
		}
		nat = append(nat, fmt.Sprintf("%s counter %s comment %q", r, verdict, comment(m.Why)))
		if m.Admin {
			// Accepted by the Admin tier, final: on to the forward
			// chain, whose Admin lookup accepts it.
			fwd = append(fwd, fmt.Sprintf("ct state new %s counter accept comment %q", r, comment(m.Why)))
		}
	}
	for _, ep := range change.LocalEndpoints(lab, host) {
		for _, port := range c.L7Ports(c.IdentityOfIP(ep.IP)) {
			for _, a := range ep.Addrs() {
				if !lab.HasFamily(topology.Family(a)) {
					continue
				}
				expr := "ip"
				if topology.Family(a) == 6 {
					expr = "ip6"
				}
				fwd = append(fwd, fmt.Sprintf("ct state new %s daddr %s tcp dport %d counter %sdrop comment %q", expr, a, port, l.log(observe.Dropped, true, true, "l7"), "L7 port: only through the proxy"))
			}
		}
	}
	return nat, fwd
}

// comment makes a string safe as an nft comment (at most 128 bytes).
func comment(s string) string {
	s = strings.ReplaceAll(s, `"`, "'")
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// l7Script rewrites the L7 chains from have to want ("" when they do not
// change); force rewrites them anyway (a table just recreated).
func l7Script(have, want *hostState, force bool) string {
	same := strings.Join(have.L7, "\n") == strings.Join(want.L7, "\n") && strings.Join(have.L7Fwd, "\n") == strings.Join(want.L7Fwd, "\n")
	if (same && !force) || (force && len(want.L7) == 0 && len(want.L7Fwd) == 0) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "add chain %s %s { type nat hook prerouting priority dstnat; policy accept; }\n", table, l7Chain)
	fmt.Fprintf(&b, "flush chain %s %s\n", table, l7Chain)
	for _, r := range want.L7 {
		fmt.Fprintf(&b, "add rule %s %s %s\n", table, l7Chain, r)
	}
	fmt.Fprintf(&b, "add chain %s %s { type filter hook forward priority filter - 1; policy accept; }\n", table, l7FwdChain)
	fmt.Fprintf(&b, "flush chain %s %s\n", table, l7FwdChain)
	for _, r := range want.L7Fwd {
		fmt.Fprintf(&b, "add rule %s %s %s\n", table, l7FwdChain, r)
	}
	return b.String()
}
