package nftables

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
)

// Table is the proxy's table in each host; Table6 its IPv6 counterpart,
// in a lab with IPv6 (as kube-proxy has ip kube-proxy and ip6
// kube-proxy).
const (
	Table  = "ip cnlab-svc"
	Table6 = "ip6 cnlab-svc"
)

// nfam is what differs between the two tables' rules.
type nfam struct {
	table, addrType, kw string
}

var (
	fam4 = nfam{Table, "ipv4_addr", "ip"}
	fam6 = nfam{Table6, "ipv6_addr", "ip6"}
)

// typ is a map's type in the family's table.
func (nf nfam) typ(t string) string { return strings.ReplaceAll(t, "ipv4_addr", nf.addrType) }

// The maps the proxy fills, with their types.
var maps = []struct{ name, typ string }{
	{"service-ips", "ipv4_addr . inet_proto . inet_service : verdict"},
	{"service-nodeports", "inet_proto . inet_service : verdict"},
	{"no-endpoint-services", "ipv4_addr . inet_proto . inet_service : verdict"},
	{"no-endpoint-nodeports", "inet_proto . inet_service : verdict"},
}

// baseChains are the chains hooked into netfilter, with their rules: the
// nat chains at kube-proxy's priorities, and the filter chains that reject
// new connections to frontends without backends before the policy
// datapath's forward chain (priority filter) sees them.
var baseChains = []struct{ name, spec, rule string }{
	{"nat-prerouting", "type nat hook prerouting priority dstnat; policy accept;", "jump services"},
	// dstnat (-100) by number: nft 1.0.6 accepts the name in prerouting only.
	{"nat-output", "type nat hook output priority -100; policy accept;", "jump services"},
	{"nat-postrouting", "type nat hook postrouting priority srcnat; policy accept;", "jump masquerading"},
	{"filter-input", "type filter hook input priority -10; policy accept;", "ct state new jump endpoints-check"},
	{"filter-forward", "type filter hook forward priority -10; policy accept;", "ct state new jump endpoints-check"},
	{"filter-output", "type filter hook output priority -10; policy accept;", "ct state new jump endpoints-check"},
}

// hostState is what was last applied on a host: every regular chain with
// its rules, every map's elements (key: verdict), the affinity sets, and
// the UDP frontends (for conntrack cleanup).
type hostState struct {
	Chains map[string][]string          `json:"chains"`
	Maps   map[string]map[string]string `json:"maps"`
	Sets   []string                     `json:"sets,omitempty"`
	UDP    []proxy.UDPFrontend          `json:"udp,omitempty"`
	// V6 is the ip6 table's state, for the IPv6 frontends: nil in a lab
	// without IPv6. Its UDP is empty (UDP above holds both families').
	V6 *hostState `json:"v6,omitempty"`
}

// names returns the suffix of a frontend's chain names, as kube-proxy
// writes them: namespace/name/protocol/port name (or number).
func suffix(f *proxy.HostFrontend) string {
	port := f.PortName
	if port == "" {
		port = fmt.Sprint(f.Port)
	}
	return proxy.Hash(f.ID, 8) + "-" + f.Service + "/" + f.Protocol + "/" + port
}

func endpointSuffix(f *proxy.HostFrontend, b service.Backend) string {
	port := f.PortName
	if port == "" {
		port = fmt.Sprint(f.Port)
	}
	id := f.ID + "/" + b.AddrPort().String()
	// nft takes no colon in a name: an IPv6 address's become dots, as
	// kube-proxy writes them.
	return proxy.Hash(id, 8) + "-" + f.Service + "/" + f.Protocol + "/" + port + "__" + strings.ReplaceAll(b.IP.String(), ":", ".") + "/" + fmt.Sprint(b.Port)
}

// Render computes the proxy's table on one host for t: pure, so it is
// tested without root.
func Render(t *service.Table, host string) hostState {
	plan := proxy.Plan(t, host)
	var p4, p6 []proxy.HostFrontend
	for _, f := range plan {
		if f.Family() == 6 {
			p6 = append(p6, f)
		} else {
			p4 = append(p4, f)
		}
	}
	st := renderFamily(p4, fam4)
	st.UDP = proxy.UDPFrontends(plan)
	if len(p6) > 0 {
		v6 := renderFamily(p6, fam6)
		st.V6 = &v6
	}
	return st
}

// renderFamily renders one family's frontends into its table's state.
func renderFamily(plan []proxy.HostFrontend, nf nfam) hostState {
	st := hostState{Chains: map[string][]string{}, Maps: map[string]map[string]string{}}
	for _, m := range maps {
		st.Maps[m.name] = map[string]string{}
	}
	st.Chains["services"] = []string{
		nf.kw + " daddr . meta l4proto . th dport vmap @service-ips",
		"fib daddr type local meta l4proto . th dport vmap @service-nodeports",
	}
	st.Chains["endpoints-check"] = []string{
		nf.kw + " daddr . meta l4proto . th dport vmap @no-endpoint-services",
		"fib daddr type local meta l4proto . th dport vmap @no-endpoint-nodeports",
	}
	st.Chains["reject-chain"] = []string{"reject"}
	st.Chains["mark-for-masquerade"] = []string{fmt.Sprintf("meta mark set meta mark | %#x", proxy.MasqMark)}
	st.Chains["masquerading"] = []string{
		fmt.Sprintf("meta mark & %#x == 0 return", proxy.MasqMark),
		fmt.Sprintf("meta mark set meta mark ^ %#x", proxy.MasqMark),
		"masquerade fully-random",
	}
	sets := map[string]bool{}
	for i := range plan {
		f := &plan[i]
		key := fmt.Sprintf("%s . %s . %d", f.VIP, f.Protocol, f.Port)
		svc := "service-" + suffix(f)
		if len(f.Cluster) > 0 {
			st.Maps["service-ips"][key] = "goto " + svc
			balance(&st, sets, svc, f, f.Cluster, nf)
		} else {
			st.Maps["no-endpoint-services"][key] = empty(f.Frontend)
		}
		if f.NodePort == 0 {
			continue
		}
		npKey := fmt.Sprintf("%s . %d", f.Protocol, f.NodePort)
		if len(f.External) == 0 {
			st.Maps["no-endpoint-nodeports"][npKey] = empty(f.Frontend)
			continue
		}
		target := svc
		if !f.SameSets() {
			target = "service-local-" + suffix(f)
			balance(&st, sets, target, f, f.External, nf)
		}
		if f.ExternalLocal {
			st.Maps["service-nodeports"][npKey] = "goto " + target
			continue
		}
		ext := "external-" + suffix(f)
		st.Chains[ext] = []string{"jump mark-for-masquerade", "goto " + target}
		st.Maps["service-nodeports"][npKey] = "goto " + ext
	}
	for s := range sets {
		st.Sets = append(st.Sets, s)
	}
	sort.Strings(st.Sets)
	return st
}

// empty is the verdict for a new connection to a frontend with no backend
// for it: rejected when the service has none, dropped when it has some but
// none for this host (traffic policy Local), as kube-proxy does.
func empty(f *service.Frontend) string {
	if len(f.Backends) == 0 {
		return "goto reject-chain"
	}
	return "drop"
}

// balance writes a service chain that picks one of backends for a new
// connection (the one its client's last connection went to, with
// affinity, else at random), and the backends' endpoint chains.
func balance(st *hostState, sets map[string]bool, name string, f *proxy.HostFrontend, backends []service.Backend, nf nfam) {
	var rules, vmap []string
	eps := make([]string, len(backends))
	for i, b := range backends {
		s := endpointSuffix(f, b)
		eps[i] = "endpoint-" + s
		var ep []string
		ep = append(ep, fmt.Sprintf("%s saddr %s jump mark-for-masquerade", nf.kw, b.IP))
		if f.Affinity > 0 {
			set := "affinity-" + s
			sets[set] = true
			rules = append(rules, fmt.Sprintf("%s saddr @%s goto %s", nf.kw, set, eps[i]))
			ep = append(ep, fmt.Sprintf("update @%s { %s saddr timeout %ds }", set, nf.kw, f.Affinity))
		}
		ep = append(ep, fmt.Sprintf("meta l4proto %s dnat to %s", f.Protocol, b.AddrPort()))
		st.Chains[eps[i]] = ep
		vmap = append(vmap, fmt.Sprintf("%d : goto %s", i, eps[i]))
	}
	if len(backends) == 1 {
		rules = append(rules, "goto "+eps[0])
	} else {
		rules = append(rules, fmt.Sprintf("numgen random mod %d vmap { %s }", len(backends), strings.Join(vmap, ", ")))
	}
	st.Chains[name] = rules
}

// fullScript rebuilds the table from nothing in one transaction: whatever
// the host held (nothing, or a table cnlab can no longer trust) is
// deleted first.
func fullScript(want *hostState) string {
	script := fullFamily(want, fam4)
	if want.V6 != nil {
		script += fullFamily(want.V6, fam6)
	}
	return script
}

// fullFamily is fullScript for one family's table.
func fullFamily(want *hostState, nf nfam) string {
	Table := nf.table
	var b strings.Builder
	fmt.Fprintf(&b, "add table %s\ndelete table %s\nadd table %s { comment \"cnlab services\"; }\n", Table, Table, Table)
	for _, m := range maps {
		fmt.Fprintf(&b, "add map %s %s { type %s; }\n", Table, m.name, nf.typ(m.typ))
	}
	for _, s := range want.Sets {
		fmt.Fprintf(&b, "add set %s %s { type %s; flags dynamic,timeout; }\n", Table, s, nf.addrType)
	}
	for _, c := range baseChains {
		fmt.Fprintf(&b, "add chain %s %s { %s }\n", Table, c.name, c.spec)
	}
	names := sorted(want.Chains)
	for _, name := range names {
		fmt.Fprintf(&b, "add chain %s %s\n", Table, name)
	}
	for _, c := range baseChains {
		fmt.Fprintf(&b, "add rule %s %s %s\n", Table, c.name, c.rule)
	}
	if nf == fam6 {
		// IPv6 has no send_redirects=0: the host's redirects are dropped
		// instead (proxy/iptables' baseJumpsOf says why).
		fmt.Fprintf(&b, "add rule %s filter-output icmpv6 type nd-redirect drop\n", Table)
	}
	for _, name := range names {
		for _, r := range want.Chains[name] {
			fmt.Fprintf(&b, "add rule %s %s %s\n", Table, name, r)
		}
	}
	for _, m := range maps {
		if e := want.Maps[m.name]; len(e) > 0 {
			fmt.Fprintf(&b, "add element %s %s { %s }\n", Table, m.name, elements(e, sorted(e)))
		}
	}
	return b.String()
}

// diffScript turns the table have describes into want's, in one
// transaction: new chains and sets are created, changed chains flushed
// and rewritten, map elements deleted and added, then chains and sets
// nothing refers to any more flushed and deleted. "" when nothing
// changes.
func diffScript(have, want *hostState) string {
	script := diffFamily(have, want, fam4)
	switch {
	case want.V6 != nil && have.V6 == nil:
		script += fullFamily(want.V6, fam6)
	case want.V6 != nil:
		script += diffFamily(have.V6, want.V6, fam6)
	case have.V6 != nil:
		script += fmt.Sprintf("delete table %s\n", Table6)
	}
	return script
}

// diffFamily is diffScript for one family's table.
func diffFamily(have, want *hostState, nf nfam) string {
	Table := nf.table
	var b strings.Builder
	for _, s := range want.Sets {
		if !contains(have.Sets, s) {
			fmt.Fprintf(&b, "add set %s %s { type %s; flags dynamic,timeout; }\n", Table, s, nf.addrType)
		}
	}
	var changed []string
	for _, name := range sorted(want.Chains) {
		old, ok := have.Chains[name]
		switch {
		case !ok:
			fmt.Fprintf(&b, "add chain %s %s\n", Table, name)
		case strings.Join(old, "\n") != strings.Join(want.Chains[name], "\n"):
			fmt.Fprintf(&b, "flush chain %s %s\n", Table, name)
		default:
			continue
		}
		changed = append(changed, name)
	}
	for _, name := range changed {
		for _, r := range want.Chains[name] {
			fmt.Fprintf(&b, "add rule %s %s %s\n", Table, name, r)
		}
	}
	for _, m := range maps {
		h, w := have.Maps[m.name], want.Maps[m.name]
		var del, add []string
		for _, k := range sorted(h) {
			if v, ok := w[k]; !ok || v != h[k] {
				del = append(del, k)
			}
		}
		for _, k := range sorted(w) {
			if v, ok := h[k]; !ok || v != w[k] {
				add = append(add, k)
			}
		}
		if len(del) > 0 {
			fmt.Fprintf(&b, "delete element %s %s { %s }\n", Table, m.name, strings.Join(del, ", "))
		}
		if len(add) > 0 {
			fmt.Fprintf(&b, "add element %s %s { %s }\n", Table, m.name, elements(w, add))
		}
	}
	var gone []string
	for _, name := range sorted(have.Chains) {
		if _, ok := want.Chains[name]; !ok {
			gone = append(gone, name)
			fmt.Fprintf(&b, "flush chain %s %s\n", Table, name)
		}
	}
	for _, name := range gone {
		fmt.Fprintf(&b, "delete chain %s %s\n", Table, name)
	}
	for _, s := range have.Sets {
		if !contains(want.Sets, s) {
			fmt.Fprintf(&b, "delete set %s %s\n", Table, s)
		}
	}
	return b.String()
}

func elements(m map[string]string, keys []string) string {
	var out []string
	for _, k := range keys {
		out = append(out, k+" : "+m[k])
	}
	return strings.Join(out, ", ")
}

func sorted[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
