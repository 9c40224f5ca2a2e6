package iptables

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
)

// The chains cnlab's iptables proxy owns. In the nat table its base
// chains and its hashed ones (ownNATChain: the iptables policy datapath
// has CNLAB-L7 there, for L7 ports); in the filter table only rejectChain is, named apart from
// CNLAB-: the iptables policy datapath takes every CNLAB- chain of filter
// for its own and deletes those it does not want when it rebuilds a host.
const (
	servicesChain  = "CNLAB-SERVICES"    // nat: one rule per frontend
	rejectChain    = "CNLABSVC-REJECT"   // filter: rejects and drops
	nodePortsChain = "CNLAB-NODEPORTS"   // nat: one rule per node port
	markChain      = "CNLAB-MARK-MASQ"   // nat: marks a connection for masquerade
	postChain      = "CNLAB-POSTROUTING" // nat: masquerades marked connections
	comment        = "cnlab services"
)

// Tables are the two tables the proxy writes.
const (
	natTable    = "nat"
	filterTable = "filter"
)

// hostState is what was last applied on a host: the rules of each chain of
// the proxy, per table, and the UDP frontends (for conntrack cleanup).
type hostState struct {
	Tables map[string]map[string][]string `json:"tables"`
	// Tables6 are the ip6tables counterparts, for the IPv6 frontends: nil
	// in a lab without IPv6.
	Tables6 map[string]map[string][]string `json:"tables6,omitempty"`
	UDP     []proxy.UDPFrontend            `json:"udp,omitempty"`
}

// family is what differs between iptables and ip6tables rules.
type family struct {
	host, mask, reject string
}

var families = map[int]family{
	4: {"/32", "255.255.255.255", "icmp-port-unreachable"},
	6: {"/128", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "icmp6-port-unreachable"},
}

// baseJumps are the rules hooking the proxy's chains into the built-in
// chains, per table, as `-A CHAIN RULE` (in a restore script they are
// inserted first instead).
var baseJumps = map[string][][2]string{
	natTable: {
		{"PREROUTING", fmt.Sprintf("-m comment --comment %q -j %s", comment, servicesChain)},
		{"OUTPUT", fmt.Sprintf("-m comment --comment %q -j %s", comment, servicesChain)},
		{"POSTROUTING", fmt.Sprintf("-m comment --comment %q -j %s", comment, postChain)},
	},
	filterTable: {
		{"INPUT", fmt.Sprintf("-m conntrack --ctstate NEW -m comment --comment %q -j %s", comment, rejectChain)},
		{"FORWARD", fmt.Sprintf("-m conntrack --ctstate NEW -m comment --comment %q -j %s", comment, rejectChain)},
		{"OUTPUT", fmt.Sprintf("-m conntrack --ctstate NEW -m comment --comment %q -j %s", comment, rejectChain)},
	},
}

// baseJumpsOf are baseJumps for family fam: IPv6 adds a rule dropping
// the host's ICMPv6 redirects (type 137, as ip6tables-save writes it),
// the counterpart of send_redirects=0, which IPv6 lacks: a connection to
// a cluster IP leaves by the bridge it came in by, and a redirect would
// tell the client that an untranslated cluster IP (a Service without
// backends) is on-link, so that its next connection would look for it
// there and never get the reject.
func baseJumpsOf(fam int) map[string][][2]string {
	if fam != 6 {
		return baseJumps
	}
	out := map[string][][2]string{}
	for t, js := range baseJumps {
		out[t] = js
	}
	out[filterTable] = append(slices.Clone(baseJumps[filterTable]),
		[2]string{"OUTPUT", fmt.Sprintf("-p ipv6-icmp -m icmp6 --icmpv6-type 137 -m comment --comment %q -j DROP", comment)})
	return out
}

// baseChains are the chains that exist whatever the table holds.
var baseChains = map[string][]string{
	natTable:    {servicesChain, nodePortsChain, markChain, postChain},
	filterTable: {rejectChain},
}

// chainName is prefix (CNLAB-SVC-, CNLAB-SVL-, CNLAB-EXT-, CNLAB-SEP-)
// and 16 characters of the hash of id: 26 characters, within iptables'
// 28.
func chainName(prefix, id string) string { return prefix + proxy.Hash(id, 16) }

// Render computes the proxy's chains on one host for t: pure, so it is
// tested without root. Frontends keep the table's order in
// CNLAB-SERVICES (the linear walk a new connection makes).
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
	st := hostState{Tables: renderFamily(p4, 4), UDP: proxy.UDPFrontends(plan)}
	if len(p6) > 0 {
		st.Tables6 = renderFamily(p6, 6)
	}
	return st
}

// renderFamily renders the frontends of one family (4: iptables, 6:
// ip6tables), in the plan's order.
func renderFamily(plan []proxy.HostFrontend, fam int) map[string]map[string][]string {
	fm := families[fam]
	nat := map[string][]string{}
	filter := map[string][]string{}
	var services, nodePorts, rejects []string
	for i := range plan {
		f := &plan[i]
		match := fmt.Sprintf("-p %s -m %s", f.Protocol, f.Protocol)
		cmt := fmt.Sprintf("-m comment --comment %q", f.Key()+" "+f.Protocol+"/"+fmt.Sprint(f.Port))
		dst := fmt.Sprintf("-d %s%s %s --dport %d %s", f.VIP, fm.host, match, f.Port, cmt)
		svc := chainName("CNLAB-SVC-", f.ID)
		if len(f.Cluster) > 0 {
			services = append(services, dst+" -j "+svc)
			balance(nat, svc, f, f.Cluster, fm)
		} else {
			rejects = append(rejects, dst+" -j "+empty(f.Frontend, fm))
		}
		if f.NodePort == 0 {
			continue
		}
		np := fmt.Sprintf("%s --dport %d %s", match, f.NodePort, cmt)
		if len(f.External) == 0 {
			rejects = append(rejects, "-m addrtype --dst-type LOCAL "+np+" -j "+empty(f.Frontend, fm))
			continue
		}
		target := svc
		if !f.SameSets() {
			target = chainName("CNLAB-SVL-", f.ID)
			balance(nat, target, f, f.External, fm)
		}
		if f.ExternalLocal {
			// Local backends only, and the client's address kept.
			nodePorts = append(nodePorts, np+" -j "+target)
			continue
		}
		ext := chainName("CNLAB-EXT-", f.ID)
		nat[ext] = []string{"-j " + markChain, "-j " + target}
		nodePorts = append(nodePorts, np+" -j "+ext)
	}
	services = append(services, fmt.Sprintf("-m addrtype --dst-type LOCAL -m comment --comment %q -j %s", "node ports", nodePortsChain))
	nat[servicesChain] = services
	nat[nodePortsChain] = nodePorts
	nat[markChain] = []string{fmt.Sprintf("-j MARK --or-mark %#x", proxy.MasqMark)}
	nat[postChain] = []string{
		fmt.Sprintf("-m mark ! --mark %#x/%#x -j RETURN", proxy.MasqMark, proxy.MasqMark),
		fmt.Sprintf("-j MARK --xor-mark %#x", proxy.MasqMark),
		fmt.Sprintf("-m comment --comment %q -j MASQUERADE --random-fully", "masquerade marked connections"),
	}
	filter[rejectChain] = rejects
	return map[string]map[string][]string{natTable: nat, filterTable: filter}
}

// empty is the verdict for a new connection to a frontend with no backend
// for it: rejected when the service has none at all, dropped when it has
// some but none on this host (traffic policy Local), as kube-proxy does.
func empty(f *service.Frontend, fm family) string {
	if len(f.Backends) == 0 {
		return "REJECT --reject-with " + fm.reject
	}
	return "DROP"
}

// balance writes a service chain name that picks one of backends for a new
// connection (the one its client's last connection went to, with
// affinity, else at random), and the backends' endpoint chains.
func balance(nat map[string][]string, name string, f *proxy.HostFrontend, backends []service.Backend, fm family) {
	var rules []string
	seps := make([]string, len(backends))
	for i, b := range backends {
		seps[i] = chainName("CNLAB-SEP-", f.ID+"/"+b.AddrPort().String())
		nat[seps[i]] = endpointChain(f, seps[i], b, fm)
	}
	if f.Affinity > 0 {
		for i, b := range backends {
			rules = append(rules, fmt.Sprintf("-m comment --comment %q -m recent --name %s --mask %s --rsource --rcheck --seconds %d --reap -j %s",
				b.AddrPort().String(), seps[i], fm.mask, f.Affinity, seps[i]))
		}
	}
	n := len(backends)
	for i, b := range backends {
		stat := ""
		if i < n-1 {
			// Each rule takes its share of what the rules before it
			// left: 1/n, 1/(n-1), ..., and the last takes the rest.
			stat = fmt.Sprintf("-m statistic --mode random --probability %.10f ", 1/float64(n-i))
		}
		rules = append(rules, fmt.Sprintf("-m comment --comment %q %s-j %s", b.AddrPort().String(), stat, seps[i]))
	}
	nat[name] = rules
}

// endpointChain translates to one backend: a connection from the backend
// itself (a hairpin) is marked for masquerade, or its reply would not come
// back through the host; with affinity the client is recorded.
func endpointChain(f *proxy.HostFrontend, name string, b service.Backend, fm family) []string {
	rules := []string{fmt.Sprintf("-s %s%s -j %s", b.IP, fm.host, markChain)}
	if f.Affinity > 0 {
		rules = append(rules, fmt.Sprintf("-m recent --name %s --mask %s --rsource --set", name, fm.mask))
	}
	return append(rules, fmt.Sprintf("-p %s -m %s -j DNAT --to-destination %s", f.Protocol, f.Protocol, b.AddrPort()))
}

// restoreScript returns an iptables-restore --noflush script that rewrites
// the changed chains of each table and deletes the gone ones; jumps are
// base rules to insert (rebuild only). "" when nothing changes.
func restoreScript(changed, gone map[string][]string, want map[string]map[string][]string, jumps map[string][][2]string) string {
	var b strings.Builder
	for _, table := range []string{filterTable, natTable} {
		c, g, j := changed[table], gone[table], jumps[table]
		if len(c) == 0 && len(g) == 0 && len(j) == 0 {
			continue
		}
		sort.Strings(c)
		sort.Strings(g)
		fmt.Fprintf(&b, "*%s\n", table)
		// Declaring a chain flushes it.
		for _, name := range append(append([]string{}, c...), g...) {
			fmt.Fprintf(&b, ":%s - [0:0]\n", name)
		}
		for _, name := range c {
			for _, r := range want[table][name] {
				fmt.Fprintf(&b, "-A %s %s\n", name, r)
			}
		}
		for _, jump := range j {
			fmt.Fprintf(&b, "-I %s 1 %s\n", jump[0], jump[1])
		}
		// Chains no longer wanted go last, once nothing jumps to them.
		for _, name := range g {
			fmt.Fprintf(&b, "-X %s\n", name)
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// diffScript turns the chains in have into those in want.
func diffScript(have, want map[string]map[string][]string) string {
	changed, gone := map[string][]string{}, map[string][]string{}
	for table, chains := range want {
		for name, rules := range chains {
			if old, ok := have[table][name]; !ok || strings.Join(old, "\n") != strings.Join(rules, "\n") {
				changed[table] = append(changed[table], name)
			}
		}
	}
	for table, chains := range have {
		for name := range chains {
			if _, ok := want[table][name]; !ok {
				gone[table] = append(gone[table], name)
			}
		}
	}
	return restoreScript(changed, gone, want, nil)
}

// rebuildScript rewrites every wanted chain, deletes every other chain of
// the proxy the listings (iptables-save per table) show, and inserts the
// base jumps they lack.
func rebuildScript(listings map[string]string, want map[string]map[string][]string) string {
	return rebuildFamily(listings, want, 4)
}

// rebuildFamily is rebuildScript for family fam's tables.
func rebuildFamily(listings map[string]string, want map[string]map[string][]string, fam int) string {
	changed, gone := map[string][]string{}, map[string][]string{}
	jumps := map[string][][2]string{}
	for table, chains := range want {
		for name := range chains {
			changed[table] = append(changed[table], name)
		}
		for _, name := range ownChains(table, listings[table]) {
			if _, ok := chains[name]; !ok {
				gone[table] = append(gone[table], name)
			}
		}
		for _, j := range baseJumpsOf(fam)[table] {
			if !strings.Contains(listings[table], "-A "+j[0]+" "+j[1]+"\n") {
				jumps[table] = append(jumps[table], j)
			}
		}
	}
	return restoreScript(changed, gone, want, jumps)
}

// ownChains returns the proxy's chains in an iptables-save listing of a
// table.
func ownChains(table, listing string) []string {
	var out []string
	for _, line := range strings.Split(listing, "\n") {
		name, ok := strings.CutPrefix(line, ":")
		if !ok {
			continue
		}
		name = strings.Fields(name)[0]
		if table == natTable && ownNATChain(name) || table == filterTable && name == rejectChain {
			out = append(out, name)
		}
	}
	return out
}

// ownNATChain reports whether a nat chain is the proxy's: one of its base
// chains or a hashed one. The policy datapath has chains of the same
// prefix in the same table (iptables' CNLAB-L7, which redirects L7 ports
// to the proxy): a rebuild must neither flush nor delete them.
func ownNATChain(name string) bool {
	if slices.Contains(baseChains[natTable], name) {
		return true
	}
	for _, p := range []string{"CNLAB-SVC-", "CNLAB-SVL-", "CNLAB-EXT-", "CNLAB-SEP-"} {
		if strings.HasPrefix(name, p) && len(name) == len(p)+16 {
			return true
		}
	}
	return false
}
