package iptables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/policy"
)

// An interpreter of the rules Render writes, for new connections: what
// the kernel does with the first packet of a flow crossing a host's nat
// PREROUTING (CNLAB-L7) and filter FORWARD (CNLAB-FWD and the chains it
// jumps to). It knows the matches and targets Render uses and fails the
// test on any other.

type packet struct {
	src, dst netip.Addr
	proto    uint8
	port     uint16
}

// outcome of a host's netfilter for a new connection.
type outcome int

const (
	passed     outcome = iota // on through FORWARD (accepted or fell through)
	dropped                   // a DROP
	redirected                // REDIRECT to the L7 proxy (nat)
)

func (o outcome) String() string { return [...]string{"passed", "dropped", "redirected"}[o] }

// matches evaluates a rule's matches and returns its target words (after
// -j or -g) and whether the target is a goto.
func matches(t *testing.T, st hostState, rule string, p packet) (bool, []string, bool) {
	t.Helper()
	w := tokens(rule)
	ok := true
	for i := 0; i < len(w); i++ {
		switch w[i] {
		case "-s", "-d":
			pfx, err := netip.ParsePrefix(w[i+1])
			if err != nil {
				t.Fatalf("rule %q: %v", rule, err)
			}
			a := p.src
			if w[i] == "-d" {
				a = p.dst
			}
			ok = ok && pfx.Contains(a)
			i++
		case "-p":
			ok = ok && policy.ProtoNumber(w[i+1]) == p.proto
			i++
		case "-m":
			switch w[i+1] {
			case "tcp", "udp", "sctp", "comment":
				i++
			case "hl": // a new connection's first packet: hop limit 64, not 255
				if w[i+2] != "--hl-eq" {
					t.Fatalf("rule %q", rule)
				}
				ok = ok && w[i+3] == "64"
				i += 3
			case "icmp6": // the interpreter's ICMPv6 is an echo request
				if w[i+2] != "--icmpv6-type" {
					t.Fatalf("rule %q", rule)
				}
				ok = ok && p.proto == policy.ProtoICMPv6 && w[i+3] == "128"
				i += 3
			case "conntrack": // a new connection: neither ESTABLISHED nor INVALID
				ok = ok && w[i+3] == "NEW"
				i += 3
			case "set":
				if w[i+2] != "--match-set" {
					t.Fatalf("rule %q", rule)
				}
				s, found := st.Sets[w[i+3]]
				if !found {
					t.Fatalf("rule %q names a set not rendered", rule)
				}
				a := p.src
				if w[i+4] == "dst" {
					a = p.dst
				}
				ok = ok && setHas(t, s, a)
				i += 4
			default:
				t.Fatalf("rule %q: unknown match %s", rule, w[i+1])
			}
		case "--dport":
			lo, hi, _ := strings.Cut(w[i+1], ":")
			l, _ := strconv.Atoi(lo)
			h := l
			if hi != "" {
				h, _ = strconv.Atoi(hi)
			}
			ok = ok && int(p.port) >= l && int(p.port) <= h
			i++
		case "--comment":
			i++
		case "-j", "-g":
			if w[i+1] == "NFLOG" && (len(w) != i+10 || w[i+2] != "--nflog-prefix" || w[i+4] != "--nflog-group" || w[i+6] != "--nflog-size" || w[i+8] != "--nflog-threshold") {
				t.Fatalf("rule %q: NFLOG as it is not rendered", rule)
			}
			return ok, w[i+1:], w[i] == "-g"
		default:
			t.Fatalf("rule %q: unknown word %q", rule, w[i])
		}
	}
	t.Fatalf("rule %q has no target", rule)
	return false, nil, false
}

func setHas(t *testing.T, s ipset, a netip.Addr) bool {
	for _, m := range s.Members {
		if s.Type == hashIP {
			if m == a.String() {
				return true
			}
			continue
		}
		pfx, err := netip.ParsePrefix(m)
		if err != nil {
			t.Fatalf("set member %q: %v", m, err)
		}
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// forward runs a packet through a host's CNLAB-FWD as iptables does:
// -j calls a chain, -g goes to one (its return goes back to the caller of
// the chain that went), RETURN or a chain's end returns; ACCEPT ends in
// passed, DROP in dropped. The trace lists the rules that matched.
func forward(t *testing.T, st hostState, p packet) (outcome, []string) {
	t.Helper()
	type frame struct {
		chain string
		next  int
	}
	stack := []frame{{fwdChain, 0}}
	var trace []string
	for steps := 0; len(stack) > 0; steps++ {
		if steps > 10000 {
			t.Fatal("a loop in the chains")
		}
		top := &stack[len(stack)-1]
		chains := st.Chains
		if p.dst.Is6() {
			chains = st.Chains6
		}
		rules, ok := chains[top.chain]
		if !ok {
			t.Fatalf("jump to chain %s, not rendered", top.chain)
		}
		if top.next >= len(rules) {
			stack = stack[:len(stack)-1]
			continue
		}
		r := rules[top.next]
		top.next++
		hit, target, isGoto := matches(t, st, r, p)
		if !hit {
			continue
		}
		trace = append(trace, top.chain+": "+r)
		switch target[0] {
		case "NFLOG": // not terminal
		case "ACCEPT":
			return passed, trace
		case "DROP":
			return dropped, trace
		case "RETURN":
			stack = stack[:len(stack)-1]
		default:
			if !strings.HasPrefix(target[0], "CNLAB-") {
				t.Fatalf("rule %q: unknown target", r)
			}
			if isGoto {
				stack = stack[:len(stack)-1]
			}
			stack = append(stack, frame{target[0], 0})
		}
	}
	return passed, trace
}

// nat runs a new TCP connection through a host's CNLAB-L7.
func nat(t *testing.T, st hostState, p packet) (outcome, []string) {
	t.Helper()
	var trace []string
	rules := st.NAT
	if p.dst.Is6() {
		rules = st.NAT6
	}
	for _, r := range rules {
		hit, target, _ := matches(t, st, r, p)
		if !hit {
			continue
		}
		switch target[0] {
		case "NFLOG":
			trace = append(trace, "nat: "+r)
			continue
		case "REDIRECT":
			return redirected, append(trace, "nat: "+r)
		case "RETURN":
			return passed, append(trace, "nat: "+r)
		}
		t.Fatalf("nat rule %q: unknown target", r)
	}
	return passed, trace
}

// crossing runs a new connection through the hosts it crosses, each with
// its rendered state: the source's host, then the destination's (once if
// they are one): nat PREROUTING (a redirect ends it: the proxy's
// connection leaves by OUTPUT), then FORWARD.
func crossing(t *testing.T, hosts []hostState, p packet) (outcome, string) {
	t.Helper()
	var trace []string
	for _, st := range hosts {
		if p.proto == policy.ProtoTCP {
			o, tr := nat(t, st, p)
			trace = append(trace, tr...)
			if o == redirected {
				return o, strings.Join(trace, "\n")
			}
		}
		o, tr := forward(t, st, p)
		trace = append(trace, tr...)
		if o == dropped {
			return o, strings.Join(trace, "\n")
		}
	}
	return passed, strings.Join(trace, "\n")
}

func (p packet) String() string {
	return fmt.Sprintf("%s -> %s %s/%d", p.src, p.dst, policy.ProtoName(p.proto), p.port)
}
