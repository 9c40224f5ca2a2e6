package experiment

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/topology"
)

// l7MatchPath is the path the L7 points' requests ask for; the matching
// rule allows GET of it, the others GET or POST of /pathI.
const l7MatchPath = "/match"

// l7Rule is one generated HTTP rule.
type l7Rule struct{ method, path string }

// l7RuleList generates a rules point's HTTP rules as seed 003's
// CiliumpolicygeneratorLabell7.sh did: rules of a method drawn from GET
// and POST (here alternating, for a deterministic set) and a path of
// their own, plus, first or last, the rule the requests match: GET
// /match. With l7Match absent no rule matches.
func l7RuleList(p results.Params) []l7Rule {
	if p.L7Mode != results.L7Rules {
		return nil
	}
	rules := make([]l7Rule, 0, p.L7Rules)
	match := l7Rule{http.MethodGet, l7MatchPath}
	fillers := p.L7Rules
	if p.L7Match != results.MatchAbsent {
		fillers--
	}
	if p.L7Match == results.MatchFirst {
		rules = append(rules, match)
	}
	for i := range fillers {
		m := http.MethodGet
		if i%2 == 1 {
			m = http.MethodPost
		}
		rules = append(rules, l7Rule{m, fmt.Sprintf("/path%d", i+1)})
	}
	if p.L7Match == results.MatchLast {
		rules = append(rules, match)
	}
	return rules
}

// l7Status is the status the point's policy gives a request: 200
// (passed to the server) unless the point's L7 rules allow no rule of
// that method and path, then 403. The generated methods and paths are
// literals, so a rule matches when both are equal (the policy model
// agrees: TestL7StatusAgreesWithModel).
func l7Status(p results.Params, method, path string) int {
	if p.L7Mode != results.L7Rules {
		return http.StatusOK
	}
	for _, r := range l7RuleList(p) {
		if r.method == method && r.path == path {
			return http.StatusOK
		}
	}
	return http.StatusForbidden
}

// l7PolicyText is an L7 point's policy: one CiliumNetworkPolicy on the
// server allowing the client on TCP 80, with the mode's rules; "" for
// none.
func l7PolicyText(p results.Params) string {
	if p.L7Mode == results.L7None || p.L7Mode == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: l7-%s, namespace: %s}\nspec:\n  endpointSelector: {matchLabels: {app: server}}\n  ingress:\n  - fromEndpoints: [{matchLabels: {app: client}}]\n    toPorts:\n    - ports: [{port: \"%d\", protocol: TCP}]\n",
		p.L7Mode, topology.DefaultNamespace, HTTPPort)
	switch p.L7Mode {
	case results.L7HTTPAny:
		b.WriteString("      rules: {http: [{}]}\n")
	case results.L7Rules:
		b.WriteString("      rules:\n        http:\n")
		for _, r := range l7RuleList(p) {
			fmt.Fprintf(&b, "        - {method: %s, path: %s}\n", r.method, r.path)
		}
	}
	return b.String()
}

// resolveL7Params fills the L7 keys' defaults and checks them on a host
// topology (chains refuse them earlier).
func resolveL7Params(p *results.Params, bad func(key, format string, args ...any) error) error {
	if p.L7Proxy == results.L7ProxyCnlab {
		p.L7Proxy = "" // the default: the points of runs without the axis
	}
	if p.L7Mode == "" {
		switch {
		case p.L7Proxy != "":
			return bad("l7Proxy", "%s: applies with an l7Mode that goes through the proxy (give l7Mode: [http-any] or [rules])", p.L7Proxy)
		case p.L7Rules != 0:
			return bad("l7Rules", "%d: applies with l7Mode rules (give l7Mode: [rules])", p.L7Rules)
		case p.L7Match != "":
			return bad("l7Match", "%s: applies with l7Mode rules (give l7Mode: [rules])", p.L7Match)
		}
		return nil
	}
	if p.Policies != 0 {
		return bad("policies", "%d: an L7 point's policy is the one l7Mode generates (leave policies out of L7 sweeps)", p.Policies)
	}
	if p.L7Mode == results.L7None || p.L7Mode == results.L7L4 {
		// No proxy: the same point whatever the proxy (the baseline the
		// proxied points are measured against), measured once.
		p.L7Proxy = ""
	}
	if p.L7Mode != results.L7Rules {
		// The same point whatever the number and place of rules: measured
		// once (Points' dedup).
		p.L7Rules, p.L7Match = 0, ""
		return nil
	}
	if p.L7Rules == 0 {
		return bad("l7Rules", "l7Mode rules needs 1 or more rules (Cilium refuses http: []): sweep the baselines with l7Mode none, l4 or http-any")
	}
	if p.L7Match == "" || p.L7Rules == 1 && p.L7Match == results.MatchLast {
		p.L7Match = results.MatchFirst // one rule is first and last: measured once
	}
	return nil
}

// checkHAProxyFamily refuses an l7Proxy haproxy point whose requests go
// over IPv6 (its ipFamily, else the lab's primary family) behind a nat
// REDIRECT (datapaths iptables and nftables): Debian's HAProxy 2.6 asks
// a redirected connection for its original destination with
// SO_ORIGINAL_DST only, never IP6T_SO_ORIGINAL_DST (seen with strace),
// so it would judge every IPv6 request against the host's own address.
// eBPF's bpf_sk_assign keeps the destination on the socket.
func checkHAProxyFamily(p results.Params, lab *topology.Spec, bad func(key, format string, args ...any) error) error {
	if p.L7Proxy != results.L7ProxyHAProxy || lab.Datapath == kind.EBPF {
		return nil
	}
	fam := p.IPFamily
	if fam == 0 {
		fam = lab.Families()[0]
	}
	if fam != 6 {
		return nil
	}
	return bad("l7Proxy", "haproxy over IPv6 on datapath %s: HAProxy 2.6 reads no IPv6 original destination after a nat REDIRECT, so over IPv6 it stands in for cnlab's proxy on datapath ebpf only (drop iptables and nftables from that sweep's IPv6 HAProxy points, e.g. with a sweep of its own)", lab.Datapath)
}

// l7Label describes an L7 point's policy for series names and tables.
func l7Label(p results.Params) string {
	switch p.L7Mode {
	case results.L7None:
		return "no policy"
	case results.L7L4:
		return "L4 allow"
	case results.L7HTTPAny:
		return "http: [{}]"
	case results.L7Rules:
		return "L7 rules, match " + p.L7Match
	}
	return ""
}

// l7Set identifies the L7 policy a point applies (l7PolicyText's
// parameters).
func l7Set(p results.Params) string {
	if p.L7Mode == "" {
		return ""
	}
	return fmt.Sprint(p.L7Mode, p.L7Rules, p.L7Match)
}
