// Package nftables is the modern netfilter datapath: one table per lab and
// host ("inet cnlab" in each host namespace) whose forward chain looks
// every new connection up in sets instead of walking rules. Concatenated
// interval sets keyed by (local endpoint, peer prefix, protocol, port
// range) hold the allowed and denied flows per direction; plain sets say
// which endpoints are isolated. An update is the difference between what
// is in the sets and what should be, sent as one nft transaction per host,
// so it is atomic and its cost follows the size of the change. It never
// touches the root network namespace.
package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Name is the datapath's name.
const Name = "nftables"

const table = "inet cnlab"

// Sets of the table. The *_subj sets hold local endpoints with policy in
// that direction, *_enf those isolated (default drop), *_deny and *_allow
// the flows: the *_x sets are hash sets of exact flows (one peer address,
// one protocol, one port — the common case, added and found in constant
// time), the others interval sets for prefixes and ranges (the kernel's
// pipapo sets, whose updates cost more as they grow; see BENCHMARKS.md).
var setNames = []string{"eg_subj", "in_subj", "eg_enf", "in_enf",
	"eg_deny_x", "eg_deny", "eg_allow_x", "eg_allow", "in_deny_x", "in_deny", "in_allow_x", "in_allow"}

// intervalSets are the sets with flags interval.
var intervalSets = map[string]bool{"eg_deny": true, "eg_allow": true, "in_deny": true, "in_allow": true}

const skeleton = `table inet cnlab {
	set eg_subj { type ipv4_addr; }
	set in_subj { type ipv4_addr; }
	set eg_enf { type ipv4_addr; }
	set in_enf { type ipv4_addr; }
	set eg_deny_x { type ipv4_addr . ipv4_addr . inet_proto . inet_service; }
	set eg_allow_x { type ipv4_addr . ipv4_addr . inet_proto . inet_service; }
	set in_deny_x { type ipv4_addr . ipv4_addr . inet_proto . inet_service; }
	set in_allow_x { type ipv4_addr . ipv4_addr . inet_proto . inet_service; }
	set eg_deny { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags interval; }
	set eg_allow { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags interval; }
	set in_deny { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags interval; }
	set in_allow { type ipv4_addr . ipv4_addr . inet_proto . inet_service; flags interval; }
	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state established,related accept
		ct state invalid drop
		ip saddr @eg_subj jump egress
		ip daddr @in_subj jump ingress
	}
	chain egress {
		ip saddr . ip daddr . meta l4proto . th dport @eg_deny_x counter drop
		ip saddr . ip daddr . meta l4proto . th dport @eg_deny counter drop
		ip saddr . ip daddr . meta l4proto . th dport @eg_allow_x counter return
		ip saddr . ip daddr . meta l4proto . th dport @eg_allow counter return
		ip saddr @eg_enf counter drop
	}
	chain ingress {
		ip daddr . ip saddr . meta l4proto . th dport @in_deny_x counter drop
		ip daddr . ip saddr . meta l4proto . th dport @in_deny counter drop
		ip daddr . ip saddr . meta l4proto . th dport @in_allow_x counter accept
		ip daddr . ip saddr . meta l4proto . th dport @in_allow counter accept
		ip daddr @in_enf counter drop
	}
}
`

type nft struct{}

// New returns the nftables datapath.
func New() datapath.Datapath { return nft{} }

func (nft) Name() string { return Name }

// Setup creates the table in every host (replacing any left from before)
// and turns br_netfilter on so that bridged traffic meets the forward
// chain.
func (nft) Setup(ctx context.Context, lab *topology.Spec) error {
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	script := "add table " + table + "\ndelete table " + table + "\n" + skeleton
	for _, h := range lab.Hosts {
		if err := datapath.EnableBridgeNetfilter(h.Netns); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		if _, err := datapath.Run(ctx, h.Netns, []byte(script), "nft", "-f", "-"); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		if err := datapath.SaveState(datapath.StatePath(lab.Name, Name, h.Name), hostState{}); err != nil {
			return err
		}
	}
	return nil
}

// AttachEndpoint has nothing to do: sets match endpoints by address.
func (nft) AttachEndpoint(context.Context, *topology.Spec, *topology.Endpoint) error { return nil }

// hostState is the content of every set on a host.
type hostState struct {
	Sets map[string][]string `json:"sets"`
}

// Apply sends each host the difference between its sets and the wanted
// ones in one transaction. If the kernel refuses the incremental change,
// the sets are flushed and refilled, still in one transaction.
func (d nft) Apply(ctx context.Context, lab *topology.Spec, c *policy.Compiled) error {
	return datapath.ApplyHosts(ctx, lab, Name,
		func(host string) hostState { return Render(lab, host, c) },
		func(ctx context.Context, ns string, have, want hostState) error {
			script := diffScript(have.Sets, want.Sets)
			if script == "" {
				return nil
			}
			if _, err := datapath.Run(ctx, ns, []byte(script), "nft", "-f", "-"); err != nil {
				// The recorded state may not match the kernel (an earlier
				// failure): rebuild every set from scratch.
				_, err = datapath.Run(ctx, ns, []byte(fullScript(want.Sets)), "nft", "-f", "-")
				return err
			}
			return nil
		})
}

func elements(op, set string, elems []string) string {
	var b strings.Builder
	for i := 0; i < len(elems); i += 500 {
		j := min(i+500, len(elems))
		fmt.Fprintf(&b, "%s element %s %s { %s }\n", op, table, set, strings.Join(elems[i:j], ", "))
	}
	return b.String()
}

func diffScript(have, want map[string][]string) string {
	var b strings.Builder
	for _, set := range setNames {
		old := toSet(have[set])
		cur := toSet(want[set])
		var del, add []string
		for e := range old {
			if !cur[e] {
				del = append(del, e)
			}
		}
		for e := range cur {
			if !old[e] {
				add = append(add, e)
			}
		}
		sort.Strings(del)
		sort.Strings(add)
		if intervalSets[set] && len(del) > maxDeletes {
			// The kernel's interval sets (pipapo) rebuild their lookup
			// tables for each deleted element: many deletes cost far more
			// than emptying the set and filling it again, which the same
			// transaction still makes atomic.
			fmt.Fprintf(&b, "flush set %s %s\n", table, set)
			if len(cur) > 0 {
				b.WriteString(elements("add", set, sortedKeys(cur)))
			}
			continue
		}
		if len(del) > 0 {
			b.WriteString(elements("delete", set, del))
		}
		if len(add) > 0 {
			b.WriteString(elements("add", set, add))
		}
	}
	return b.String()
}

// maxDeletes is the number of deletions in one set above which the set is
// refilled instead (see diffScript; measured in BENCHMARKS.md).
const maxDeletes = 32

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func fullScript(want map[string][]string) string {
	var b strings.Builder
	for _, set := range setNames {
		fmt.Fprintf(&b, "flush set %s %s\n", table, set)
		if len(want[set]) > 0 {
			b.WriteString(elements("add", set, want[set]))
		}
	}
	return b.String()
}

func toSet(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

// Render computes the content of every set on one host. It is pure, so
// it is tested without root.
func Render(lab *topology.Spec, host string, c *policy.Compiled) hostState {
	st := hostState{Sets: map[string][]string{}}
	for _, ep := range datapath.LocalEndpoints(lab, host) {
		id := c.IdentityOfIP(ep.IP)
		enf := c.Enforced[id]
		for _, dir := range []policy.Dir{policy.Egress, policy.Ingress} {
			prefix := "in_"
			enforced := enf.Ingress
			if dir == policy.Egress {
				prefix, enforced = "eg_", enf.Egress
			}
			rules := c.RulesFor(id, dir)
			if len(rules) == 0 && !enforced {
				continue
			}
			st.Sets[prefix+"subj"] = append(st.Sets[prefix+"subj"], ep.IP.String())
			if enforced {
				st.Sets[prefix+"enf"] = append(st.Sets[prefix+"enf"], ep.IP.String())
			}
			var allow, deny []policy.Entry
			for _, r := range rules {
				if r.Deny {
					deny = append(deny, r)
				} else {
					allow = append(allow, r)
				}
			}
			for kind, rs := range map[string][]policy.Entry{"allow": allow, "deny": deny} {
				for _, b := range Disjoint(c, rs) {
					set := prefix + kind
					if b.exact() {
						set += "_x"
					}
					st.Sets[set] = append(st.Sets[set], b.element(ep.IP))
				}
			}
		}
	}
	for k := range st.Sets {
		sort.Strings(st.Sets[k])
	}
	return st
}

// Box is one set element: a peer prefix, a protocol range and a port
// range.
type Box struct {
	Peer             netip.Prefix
	ProtoLo, ProtoHi uint8
	PortLo, PortHi   uint16
}

// exact reports whether the box is a single flow: one peer address, one
// protocol, one port. Exact boxes go to hash sets.
func (b Box) exact() bool {
	return b.Peer.Bits() == 32 && b.ProtoLo == b.ProtoHi && b.PortLo == b.PortHi
}

func (b Box) element(local netip.Addr) string {
	if b.exact() {
		return fmt.Sprintf("%s . %s . %d . %d", local, b.Peer.Addr(), b.ProtoLo, b.PortLo)
	}
	proto := fmt.Sprint(b.ProtoLo)
	if b.ProtoHi != b.ProtoLo {
		proto = fmt.Sprintf("%d-%d", b.ProtoLo, b.ProtoHi)
	}
	port := fmt.Sprint(b.PortLo)
	if b.PortHi != b.PortLo {
		port = fmt.Sprintf("%d-%d", b.PortLo, b.PortHi)
	}
	return fmt.Sprintf("%s . %s . %s . %s", local, b.Peer, proto, port)
}

// Disjoint turns the rules of one subject and direction into set elements
// that do not overlap (the kernel's interval sets refuse overlapping
// elements). Peer prefixes are split into disjoint atoms; for each atom,
// the ports of every rule covering it are merged per protocol.
func Disjoint(c *policy.Compiled, rules []policy.Entry) []Box {
	type cover struct {
		pfx netip.Prefix
		r   policy.Entry
	}
	var covers []cover
	seen := map[netip.Prefix]bool{}
	var prefixes []netip.Prefix
	for _, r := range rules {
		for _, p := range c.PeerPrefixes(r) {
			covers = append(covers, cover{p, r})
			if !seen[p] {
				seen[p] = true
				prefixes = append(prefixes, p)
			}
		}
	}
	var out []Box
	for _, atom := range atoms(prefixes) {
		all := false
		ports := map[uint8][][2]uint16{}
		for _, cv := range covers {
			if !cv.pfx.Contains(atom.Addr()) || cv.pfx.Bits() > atom.Bits() {
				continue
			}
			if cv.r.Proto == policy.ProtoAny {
				all = true
				break
			}
			lo, hi := cv.r.PortLo, cv.r.PortHi
			if lo == 0 {
				lo, hi = 0, 65535
			}
			ports[cv.r.Proto] = append(ports[cv.r.Proto], [2]uint16{lo, hi})
		}
		if all {
			out = append(out, Box{Peer: atom, ProtoLo: 0, ProtoHi: 255, PortLo: 0, PortHi: 65535})
			continue
		}
		var protos []int
		for p := range ports {
			protos = append(protos, int(p))
		}
		sort.Ints(protos)
		for _, p := range protos {
			for _, iv := range merge(ports[uint8(p)]) {
				out = append(out, Box{Peer: atom, ProtoLo: uint8(p), ProtoHi: uint8(p), PortLo: iv[0], PortHi: iv[1]})
			}
		}
	}
	return out
}

// atoms splits a set of prefixes into disjoint prefixes, each entirely
// inside or outside every input prefix.
func atoms(prefixes []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range prefixes {
		var inner []netip.Prefix
		for _, q := range prefixes {
			if q.Bits() > p.Bits() && p.Contains(q.Addr()) {
				inner = append(inner, q)
			}
		}
		out = append(out, policy.Subtract(p, inner)...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Addr() != out[j].Addr() {
			return out[i].Addr().Less(out[j].Addr())
		}
		return out[i].Bits() < out[j].Bits()
	})
	return out
}

// merge unions port intervals.
func merge(ivs [][2]uint16) [][2]uint16 {
	sort.Slice(ivs, func(i, j int) bool { return ivs[i][0] < ivs[j][0] })
	var out [][2]uint16
	for _, iv := range ivs {
		if n := len(out); n > 0 && int(iv[0]) <= int(out[n-1][1])+1 {
			out[n-1][1] = max(out[n-1][1], iv[1])
			continue
		}
		out = append(out, iv)
	}
	return out
}

// Detach deletes the table from every host.
func (nft) Detach(ctx context.Context, lab *topology.Spec) error {
	for _, h := range lab.Hosts {
		if _, err := datapath.Run(ctx, h.Netns, []byte("add table "+table+"\ndelete table "+table+"\n"), "nft", "-f", "-"); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
		if err := datapath.SaveState(datapath.StatePath(lab.Name, Name, h.Name), hostState{}); err != nil {
			return err
		}
	}
	return nil
}

// Describe lists the table of every host.
func (nft) Describe(ctx context.Context, lab *topology.Spec) (string, error) {
	var b strings.Builder
	for _, h := range lab.Hosts {
		out, err := datapath.Run(ctx, h.Netns, nil, "nft", "list", "table", table)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "# host %s\n%s\n", h.Name, out)
	}
	return b.String(), nil
}
