package iptables

import (
	"context"
	"fmt"
	"github.com/cnlab/cnlab/internal/netns"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// l7Chain is cnlab's chain in the nat table: it redirects new connections
// to L7 ports to the host's proxy (l7proxy). Redirected connections go to
// the host's INPUT, not FORWARD, so this chain carries the whole L3/L4
// decision for them: a same-host source's egress, then the destination's
// ingress rules in the order of its ingress chain (denies first); what it
// does not redirect continues to FORWARD, where the destination's ingress
// chain drops new connections to its L7 ports.
const l7Chain = "CNLAB-L7"

// l7DropComment is the comment of an ingress chain's drop of new
// connections to an L7 port (l7Drops).
const l7DropComment = "L7 port: only through the proxy"

// l7JumpRule hooks CNLAB-L7 into nat PREROUTING.
var l7JumpRule = fmt.Sprintf("-I PREROUTING 1 -m comment --comment %q -j %s", comment, l7Chain)

// renderL7 returns the rules of CNLAB-L7 for one host in the nat table of
// family fam (4: iptables, 6: ip6tables; nil when none of its endpoints
// has an L7 port).
func renderL7(lab *topology.Spec, host string, c *policy.Compiled, fam int, o observer) []string {
	var out []string
	if !lab.HasFamily(fam) {
		return nil
	}
	for _, m := range datapath.L7RedirectsOf(lab, host, c, fam) {
		r := fmt.Sprintf("-d %s/%d -p tcp -m tcp --dport %d", m.Dst, m.Dst.BitLen(), m.Port)
		if m.Src.IsValid() {
			r = "-s " + m.Src.String() + " " + r
		}
		r = fmt.Sprintf("%s -m comment --comment %s", r, quote(m.Why))
		verdict := "RETURN"
		if m.Redirect {
			verdict = fmt.Sprintf("REDIRECT --to-ports %d", l7proxy.Port)
			out = append(out, o.before(r, observe.Redirected, policy.Ingress, true, m.RuleID())...)
		}
		out = append(out, r+" -j "+verdict)
	}
	return out
}

// l7Drops are the first rules of an endpoint's ingress chain: a new
// connection to an L7 port reaches the endpoint only through the proxy.
func l7Drops(c *policy.Compiled, id uint32, o observer) []string {
	var out []string
	for _, port := range c.L7Ports(id) {
		m := fmt.Sprintf("-p tcp -m tcp --dport %d -m comment --comment %s", port, quote(l7DropComment))
		out = append(out, o.before(m, observe.Dropped, policy.Ingress, true, "l7")...)
		out = append(out, m+" -j DROP")
	}
	return out
}

// natScript rewrites CNLAB-L7 (a restore script's nat part; "" when it
// does not change). jump adds PREROUTING's jump to it.
func natScript(have, want []string, force, jump bool) string {
	if !force && !jump && strings.Join(have, "\n") == strings.Join(want, "\n") {
		return ""
	}
	var b strings.Builder
	b.WriteString("*nat\n")
	fmt.Fprintf(&b, ":%s - [0:0]\n", l7Chain)
	for _, r := range want {
		fmt.Fprintf(&b, "-A %s %s\n", l7Chain, r)
	}
	if jump {
		b.WriteString(l7JumpRule + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// natJumped reports whether nat PREROUTING jumps to CNLAB-L7.
func natJumped(ctx context.Context, h *topology.Host, bin string) bool {
	_, err := netns.Run(ctx, h.Netns, nil, bin, "-w", "-t", "nat", "-C", "PREROUTING", "-m", "comment", "--comment", comment, "-j", l7Chain)
	return err == nil
}

// natSteps orders a change of a host with L7 ports as three
// iptables-restore commits (the nat and filter tables are two commits even
// in one script with the legacy backend):
//
//  1. CNLAB-L7 redirects each (endpoint, port) of either set as the set
//     that has it decides, the new one first: a port becoming an L7 port is
//     redirected before its ingress chain drops new connections to it;
//  2. the filter chains switch;
//  3. CNLAB-L7 holds the new redirects alone: a port that stops being an
//     L7 port goes on to its new ingress chain only once that chain no
//     longer drops new connections to it.
//
// So a connection is at every moment either redirected (to a proxy that
// holds the old and the new rules) or judged by the ingress chain of the
// set that does not redirect it: no transient drop of what both sets
// allow, nothing both deny let through.
func natSteps(have, want []string, filter string, jump bool) []string {
	union := natUnion(have, want)
	return []string{natScript(have, union, jump, jump), filter, natScript(union, want, false, false)}
}

// natUnion is the CNLAB-L7 of step 1: want's rules, then have's rules for
// the (destination, port) pairs want has none for.
func natUnion(have, want []string) []string {
	inWant := map[string]bool{}
	for _, r := range want {
		inWant[natKey(r)] = true
	}
	out := append([]string(nil), want...)
	for _, r := range have {
		if !inWant[natKey(r)] {
			out = append(out, r)
		}
	}
	return out
}

// natKey is the destination and port a CNLAB-L7 rule is about.
func natKey(rule string) string {
	_, rest, _ := strings.Cut(rule, "-d ")
	dst, rest, _ := strings.Cut(rest, " ")
	_, port, _ := strings.Cut(rest, "--dport ")
	port, _, _ = strings.Cut(port, " ")
	return dst + ":" + port
}
