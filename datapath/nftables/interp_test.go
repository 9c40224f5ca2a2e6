package nftables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
)

// An interpreter of what a host's table does with the first packet of a
// new connection: the L7 chains (nat prerouting l7, then forward l7fwd)
// and the forward chain with the generation's chains as chainDeclsFor
// writes them, looking packets up in the rendered sets and maps. It knows
// the expressions the datapath writes and fails the test on any other;
// a packet matching two elements of one set or map fails it too (the
// kernel refuses overlapping interval elements).

type packet struct {
	src, dst netip.Addr
	proto    uint8
	port     uint16
}

func (p packet) String() string {
	return fmt.Sprintf("%s -> %s %s/%d", p.src, p.dst, policy.ProtoName(p.proto), p.port)
}

type outcome int

const (
	passed     outcome = iota // on through forward
	dropped                   // a drop
	redirected                // redirected to the L7 proxy (nat)
)

func (o outcome) String() string { return [...]string{"passed", "dropped", "redirected"}[o] }

// value is what an expression reads: an address or a number.
type value struct {
	a netip.Addr
	n uint64
}

// field is one value of a packet an expression reads; "ip" and "ip6"
// read nothing (match nothing) in a packet of the other family.
func field(t *testing.T, p packet, name string) (value, bool) {
	switch name {
	case "ip saddr", "ip6 saddr":
		return value{a: p.src}, strings.HasPrefix(name, "ip6") == p.src.Is6()
	case "ip daddr", "ip6 daddr":
		return value{a: p.dst}, strings.HasPrefix(name, "ip6") == p.dst.Is6()
	case "meta l4proto":
		return value{n: uint64(p.proto)}, true
	case "th dport":
		// Only TCP, UDP and SCTP elements have ports; another
		// protocol's header has none to read here.
		return value{n: uint64(p.port)}, p.proto == policy.ProtoTCP || p.proto == policy.ProtoUDP || p.proto == policy.ProtoSCTP
	}
	t.Fatalf("unknown field %q", name)
	return value{}, false
}

// within reports whether v is in an element's part: an address, a
// prefix, a number or a range lo-hi.
func within(t *testing.T, part string, val value, isAddr bool) bool {
	v := val.n
	if isAddr {
		if strings.Contains(part, "/") {
			return netip.MustParsePrefix(part).Contains(val.a)
		}
		return netip.MustParseAddr(part) == val.a
	}
	lo, hi, isRange := strings.Cut(part, "-")
	l, err := strconv.ParseUint(lo, 10, 32)
	if err != nil {
		t.Fatalf("element part %q", part)
	}
	h := l
	if isRange {
		if h, err = strconv.ParseUint(hi, 10, 32); err != nil {
			t.Fatalf("element part %q", part)
		}
	}
	return v >= l && v <= h
}

// lookup returns the value (a map's verdict, "" for a set) of the one
// element of set that the key fields of p match.
func lookup(t *testing.T, st hostState, set string, fields []string, p packet) (string, bool) {
	var vals []value
	for _, f := range fields {
		v, ok := field(t, p, f)
		if !ok {
			return "", false
		}
		vals = append(vals, v)
	}
	found, value := 0, ""
	for _, e := range st.Sets[set] {
		key, val, _ := strings.Cut(e, " : ")
		parts := strings.Split(key, " . ")
		if len(parts) != len(fields) {
			t.Fatalf("set %s: element %q for key %v", set, e, fields)
		}
		hit := true
		for i, part := range parts {
			hit = hit && within(t, part, vals[i], strings.HasPrefix(fields[i], "ip"))
		}
		if hit {
			found++
			value = val
		}
	}
	if found > 1 {
		t.Fatalf("set %s: %d elements match %v (overlap)", set, found, p)
	}
	return value, found == 1
}

// unlog takes a rule's log statement out (cutting its prefix, "" for
// none); a log statement as the datapath does not write it fails the
// test.
func unlog(t *testing.T, rule string) (string, string) {
	before, after, ok := strings.Cut(rule, "log group ")
	if !ok {
		return rule, ""
	}
	head := fmt.Sprintf("%d snaplen 128 prefix \"", observe.NFLOGGroup)
	if !strings.HasPrefix(after, head) {
		t.Fatalf("rule %q: log statement", rule)
	}
	prefix, rest, _ := strings.Cut(after[len(head):], "\" ")
	if _, ok := observe.ParsePrefix(prefix); !ok {
		t.Fatalf("rule %q: prefix %q is not cnlab's", rule, prefix)
	}
	return before + rest, prefix
}

// runRule evaluates a rule: key fields, a set or map, a verdict (or vmap).
// A rule that only logs (the end of the forward chain) hits with verdict
// "".
func runRule(t *testing.T, st hostState, rule string, p packet) (verdict string, hit bool) {
	rule, _ = unlog(t, strings.Replace(rule, " counter", "", 1))
	if strings.HasPrefix(rule, "icmpv6 type ") {
		return "", false // neighbour discovery: not a new connection
	}
	if r, ok := strings.CutPrefix(rule, "ct state new "); ok { // the end of the forward chain
		if fam, ok := strings.CutPrefix(r, "meta nfproto ipv"); ok && (fam[0] == '6') != p.dst.Is6() {
			return "", false
		}
		for expr, v6 := range map[string]bool{"ip daddr != { ": false, "ip6 daddr != { ": true} {
			set, ok := strings.CutPrefix(r, expr)
			if !ok {
				continue
			}
			if v6 != p.dst.Is6() {
				return "", false
			}
			set, _, _ = strings.Cut(set, " }")
			for _, pfx := range strings.Split(set, ", ") {
				if netip.MustParsePrefix(pfx).Contains(p.dst) {
					return "", false
				}
			}
		}
		return "", true
	}
	if strings.HasPrefix(rule, "ct state ") {
		return "", false // a new connection: neither established, related nor invalid
	}
	if v, ok := strings.CutPrefix(rule, "log_only "); ok {
		return v, true
	}
	keyPart, rest, ok := strings.Cut(rule, " @")
	if !ok {
		t.Fatalf("rule %q", rule)
	}
	isMap := strings.HasSuffix(keyPart, " vmap")
	keyPart = strings.TrimSuffix(keyPart, " vmap")
	set, verdict, _ := strings.Cut(rest, " ")
	if g := strings.LastIndex(set, "_g"); g > 0 {
		set = set[:g]
	}
	fields := strings.Split(keyPart, " . ")
	value, found := lookup(t, st, set, fields, p)
	if !found {
		return "", false
	}
	if isMap {
		return value, true
	}
	return verdict, true
}

// chains parses chainDeclsFor's script into its chains' rules.
func chains(script string) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(script, "\n") {
		if r, ok := strings.CutPrefix(line, "add rule "+table+" "); ok {
			name, rule, _ := strings.Cut(r, " ")
			if strings.HasPrefix(name, "log_") { // a log chain: it logs, then its verdict
				out[name] = append(out[name], "log_only "+rule)
				continue
			}
			g := strings.LastIndex(name, "_g")
			out[name[:g]] = append(out[name[:g]], rule)
		}
	}
	return out
}

// layouts are the chains of a generation, per tier maps looked up and
// observe level.
var layouts = map[string]map[string][]string{}

func chainsOf(l layout) map[string][]string {
	k := strings.Join(l.tiers, ",") + " " + l.observe + " " + strings.Join(l.remote, ",") + " " + fmt.Sprint(l.fams)
	if cs, ok := layouts[k]; ok {
		return cs
	}
	cs := chains(generationDecls(0, l))
	for _, line := range strings.Split(strings.TrimSpace(forwardRules(0, l)), "\n") {
		if r, ok := strings.CutPrefix(line, "add rule "+table+" forward "); ok {
			cs["forward"] = append(cs["forward"], r)
		}
	}
	layouts[k] = cs
	return cs
}

// forwardChain walks the forward chain (forwardRules) and the chains it
// goes to as nftables does: jump calls a chain, goto goes to one (its end
// or return goes back to the caller of the chain that went), return or a
// chain's end returns; accept ends in passed, drop in dropped.
func forwardChain(t *testing.T, st hostState, p packet) (outcome, []string) {
	t.Helper()
	cs := chainsOf(st.layout())
	type frame struct {
		chain string
		next  int
	}
	stack := []frame{{"forward", 0}}
	var trace []string
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		rules, ok := cs[top.chain]
		if !ok {
			t.Fatalf("chain %s not declared", top.chain)
		}
		if top.next >= len(rules) {
			stack = stack[:len(stack)-1]
			continue
		}
		r := rules[top.next]
		top.next++
		v, hit := runRule(t, st, r, p)
		if !hit {
			continue
		}
		trace = append(trace, top.chain+": "+r+" => "+v)
		verb, target, _ := strings.Cut(v, " ")
		switch verb {
		case "": // logged only
		case "drop":
			return dropped, trace
		case "accept":
			return passed, trace
		case "return":
			stack = stack[:len(stack)-1]
		case "jump", "goto":
			if verb == "goto" {
				stack = stack[:len(stack)-1]
			}
			if g := strings.LastIndex(target, "_g"); g > 0 {
				target = target[:g]
			}
			stack = append(stack, frame{target, 0})
		default:
			t.Fatalf("rule %q: verdict %q", r, v)
		}
	}
	return passed, trace
}

// words evaluates the L7 chains' rules: matches on ip saddr, ip daddr,
// tcp dport, ct state new, then a verdict.
func l7Rule(t *testing.T, rule string, p packet) (string, bool) {
	rule, _, _ = strings.Cut(rule, " comment ")
	rule, _ = unlog(t, rule)
	w := strings.Fields(rule)
	for i := 0; i < len(w); i++ {
		switch {
		case w[i] == "ct" && w[i+1] == "state" && w[i+2] == "new":
			i += 2
		case (w[i] == "ip" || w[i] == "ip6") && (w[i+1] == "saddr" || w[i+1] == "daddr"):
			a := p.src
			if w[i+1] == "daddr" {
				a = p.dst
			}
			if (w[i] == "ip6") != a.Is6() {
				return "", false
			}
			v := w[i+2]
			if !strings.Contains(v, "/") {
				v += "/" + fmt.Sprint(a.BitLen())
			}
			if !netip.MustParsePrefix(v).Contains(a) {
				return "", false
			}
			i += 2
		case w[i] == "tcp" && w[i+1] == "dport":
			if p.proto != policy.ProtoTCP || w[i+2] != fmt.Sprint(p.port) {
				return "", false
			}
			i += 2
		case w[i] == "counter":
		default:
			return strings.Join(w[i:], " "), true
		}
	}
	t.Fatalf("L7 rule %q has no verdict", rule)
	return "", false
}

// host runs a new connection through one host: nat prerouting's l7
// chain, then forward: l7fwd (priority filter - 1) and the forward chain.
func host(t *testing.T, st hostState, p packet) (outcome, []string) {
	t.Helper()
	var trace []string
	for _, r := range st.L7 {
		v, hit := l7Rule(t, r, p)
		if !hit {
			continue
		}
		trace = append(trace, "l7: "+r)
		if strings.HasPrefix(v, "redirect") {
			return redirected, trace
		}
		break
	}
	for _, r := range st.L7Fwd {
		v, hit := l7Rule(t, r, p)
		if !hit {
			continue
		}
		trace = append(trace, "l7fwd: "+r)
		if v == "drop" {
			return dropped, trace
		}
		break // accept: on to the next base chain
	}
	o, tr := forwardChain(t, st, p)
	return o, append(trace, tr...)
}

// crossing runs a new connection through the source's host, then the
// destination's (once if they are one).
func crossing(t *testing.T, hosts []hostState, p packet) (outcome, string) {
	t.Helper()
	var trace []string
	for _, st := range hosts {
		o, tr := host(t, st, p)
		trace = append(trace, tr...)
		if o != passed {
			return o, strings.Join(trace, "\n")
		}
	}
	return passed, strings.Join(trace, "\n")
}
