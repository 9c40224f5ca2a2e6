package ebpf

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Random policies of every tier on the scenario lab (built in Go: the
// parser of the cluster kinds is not this package's), for the
// differential tests: what the maps of a plan decide against what the
// IR decides (policy.Compiled.SideAllows).

// tierLab is the scenario lab.
func tierLab(t testing.TB) *topology.Spec {
	t.Helper()
	spec, err := topology.Parse([]byte(scenarios.Lab), "tiers", topology.Overrides{Name: "tiers", Datapath: "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// tierTargets are the protocols and ports the differential tests probe:
// single ports, a port inside and one outside the ranges the policies
// use, UDP, and SCTP (only "any protocol" rules match it).
var tierTargets = []struct {
	proto uint8
	port  uint16
}{{policy.ProtoTCP, 80}, {policy.ProtoTCP, 81}, {policy.ProtoTCP, 85}, {policy.ProtoTCP, 443}, {policy.ProtoUDP, 81}, {policy.ProtoUDP, 80}, {policy.ProtoSCTP, 80}}

// tierRemotes are the remote addresses probed besides the lab's
// endpoints: the world, and an unused address of a pod CIDR.
var tierRemotes = []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("10.0.191.200")}

// randomPolicies draws a set of NetworkPolicies, CiliumNetworkPolicies
// with deny rules, Admin-tier and Baseline-tier policies.
func randomPolicies(r *rand.Rand) []*policy.Policy {
	pick := func(n int) int { return r.IntN(n) }
	nsSels := []*policy.Selector{{}, {MatchLabels: map[string]string{"ns": "x"}}, {MatchLabels: map[string]string{"ns": "y"}},
		{MatchLabels: map[string]string{"tier": "front"}}}
	podSels := []policy.Selector{{}, {MatchLabels: map[string]string{"app": "web"}}, {MatchLabels: map[string]string{"pod": "b"}},
		{MatchLabels: map[string]string{"app": "db"}}}
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.0.192.0/24"), netip.MustParsePrefix("10.0.191.16/28"),
		netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("10.0.192.21/32")}
	ports := [][]policy.Port{nil, {{Protocol: policy.TCP, Port: 80}}, {{Protocol: policy.TCP, Port: 70, EndPort: 90}},
		{{Protocol: policy.UDP, Port: 81}}, {{Protocol: policy.TCP, Port: 81}, {Protocol: policy.UDP, Port: 80}},
		{{Protocol: policy.TCP, Port: 64, EndPort: 127}}, {{Protocol: policy.TCP, Port: 84, EndPort: 86}}}
	rule := func(path string, cilium bool, ns string) policy.Rule {
		ru := policy.Rule{Path: path, Ports: ports[pick(len(ports))]}
		switch pick(4) {
		case 0:
			ru.AnyPeer = true
		case 1:
			ru.Peers = []policy.Peer{{CIDR: cidrs[pick(len(cidrs))]}}
		default:
			sel := &policy.EndpointSel{Pods: podSels[pick(len(podSels))], CiliumKeys: cilium, Namespace: ns}
			if ns == "" || pick(2) == 0 {
				sel.Namespace, sel.Namespaces = "", nsSels[pick(len(nsSels))]
			}
			ru.Peers = []policy.Peer{{Endpoints: sel}}
			if pick(3) == 0 {
				ru.Peers = append(ru.Peers, policy.Peer{CIDR: cidrs[pick(len(cidrs))]})
			}
		}
		return ru
	}
	namespaces := []string{"x", "y", "z"}
	var out []*policy.Policy
	for i := range pick(3) {
		ns := namespaces[pick(3)]
		p := &policy.Policy{Kind: policy.KindNetworkPolicy, Namespace: ns, Name: fmt.Sprintf("np%d", i)}
		sp := policy.Spec{Subject: podSels[pick(len(podSels))]}
		sp.Ingress.Enforce, sp.Egress.Enforce = pick(3) > 0, pick(2) == 0
		for j := range pick(3) {
			sp.Ingress.Allow = append(sp.Ingress.Allow, rule(fmt.Sprintf("spec.ingress[%d]", j), false, ns))
		}
		for j := range pick(2) {
			sp.Egress.Allow = append(sp.Egress.Allow, rule(fmt.Sprintf("spec.egress[%d]", j), false, ns))
		}
		p.Specs = []policy.Spec{sp}
		out = append(out, p)
	}
	if pick(3) == 0 {
		ns := namespaces[pick(3)]
		p := &policy.Policy{Kind: policy.KindCNP, Namespace: ns, Name: "cnp"}
		sp := policy.Spec{Subject: podSels[pick(len(podSels))]}
		sp.Ingress.Deny = []policy.Rule{rule("specs[0].ingressDeny[0]", true, ns)}
		if pick(2) == 0 {
			sp.Egress.Deny = []policy.Rule{rule("specs[0].egressDeny[0]", true, ns)}
		}
		p.Specs = []policy.Spec{sp}
		out = append(out, p)
	}
	actions := []string{policy.ActionAccept, policy.ActionDeny, policy.ActionPass, policy.ActionAllow}
	ordered := func(dir string, n int, pass bool) []policy.Rule {
		var rs []policy.Rule
		for j := range n {
			ru := rule(fmt.Sprintf("spec.%s[%d]", dir, j), false, "")
			ru.Action = actions[pick(len(actions))]
			if !pass && ru.Action == policy.ActionPass {
				ru.Action = policy.ActionDeny
			}
			rs = append(rs, ru)
		}
		return rs
	}
	for i := range pick(4) {
		p := &policy.Policy{Kind: policy.KindAdminNP, Name: fmt.Sprintf("anp%d", i), Tier: policy.TierAdmin, Priority: pick(4)}
		if pick(2) == 0 {
			p.Kind = policy.KindClusterNP
		}
		sp := policy.Spec{SubjectNamespaces: nsSels[pick(len(nsSels))], Subject: podSels[pick(len(podSels))]}
		sp.Ingress.Ordered = ordered("ingress", pick(4), true)
		sp.Egress.Ordered = ordered("egress", pick(3), true)
		p.Specs = []policy.Spec{sp}
		out = append(out, p)
	}
	for i := range pick(3) {
		p := &policy.Policy{Kind: policy.KindClusterNP, Name: fmt.Sprintf("cnp-baseline%d", i), Tier: policy.TierBaseline, Priority: pick(3)}
		if i == 0 && pick(2) == 0 {
			p.Kind, p.Name, p.Priority = policy.KindBaselineNP, "default", 0
		}
		sp := policy.Spec{SubjectNamespaces: nsSels[pick(len(nsSels))], Subject: podSels[pick(len(podSels))]}
		sp.Ingress.Ordered = ordered("ingress", pick(4), p.Kind == policy.KindClusterNP)
		sp.Egress.Ordered = ordered("egress", pick(3), p.Kind == policy.KindClusterNP)
		p.Specs = []policy.Spec{sp}
		out = append(out, p)
	}
	return out
}

// compileTiers compiles policies on the lab.
func compileTiers(t testing.TB, lab *topology.Spec, pols []*policy.Policy) *policy.Compiled {
	t.Helper()
	m, err := policy.NewModel(lab, pols)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mapLookup is what the programs' two-stage lookup (hash of exact
// entries, then LPM) answers for a key: the entry of the longest prefix
// containing it, or nil.
func mapLookup(es []polEntry, peer uint32, dir, proto uint8, port uint16) *polEntry {
	var best *polEntry
	for i := range es {
		e := &es[i]
		if e.Peer == peer && e.Dir == dir && covers(*e, proto, port) && (best == nil || e.Plen > best.Plen) {
			best = e
		}
	}
	return best
}

// goVerdict is policy_verdict in Go over an endpoint's entries, through
// the values the maps hold (policyKV): the reason and the rule.
func goVerdict(ep *epPlan, peer uint32, dir, proto uint8, port uint16) (cnlabReason, uint32, bool) {
	var a, b *cnlabPolicyVal
	if e := mapLookup(ep.Entries, peer, dir, proto, port); e != nil {
		_, v := policyKV(*e)
		a = &v
	}
	wild := cnlabIsolationWILD_INGRESS
	iso := cnlabIsolationISO_INGRESS
	if dir == uint8(policy.Egress) {
		wild, iso = cnlabIsolationWILD_EGRESS, cnlabIsolationISO_EGRESS
	}
	if ep.Enforce&wild != 0 {
		if e := mapLookup(ep.Entries, 0, dir, proto, port); e != nil {
			_, v := policyKV(*e)
			b = &v
		}
	}
	prec, rule, act := precNone, noRule, uint8(cnlabPolicyActACT_NONE)
	if a != nil {
		prec, rule, act = a.Prec, a.Rule, a.Act
	}
	if b != nil && b.Prec < prec {
		prec, rule, act = b.Prec, b.Rule, b.Act
	}
	if act == uint8(cnlabPolicyActACT_PASS) {
		act, prec = uint8(cnlabPolicyActACT_NONE), precNone
		if a != nil && a.BelowPrec < prec {
			prec, rule, act = a.BelowPrec, a.BelowRule, a.BelowAct
		}
		if b != nil && b.BelowPrec < prec {
			rule, act = b.BelowRule, b.BelowAct
		}
	}
	switch cnlabPolicyAct(act) {
	case cnlabPolicyActACT_DENY:
		return cnlabReasonR_DROP_DENY, rule, false
	case cnlabPolicyActACT_ALLOW:
		return cnlabReasonR_ALLOW_POLICY, rule, false
	case cnlabPolicyActACT_PROXY:
		return cnlabReasonR_ALLOW_POLICY, rule, dir == uint8(policy.Ingress)
	}
	if ep.Enforce&iso != 0 {
		return cnlabReasonR_DROP_DEFAULT, rule, false
	}
	return cnlabReasonR_ALLOW_UNENFORCED, rule, false
}

// ipcacheKey is the ipcache's answer for an address: the longest prefix,
// or the world.
func ipcacheKey(ipc []ipEntry, a netip.Addr) uint32 {
	key, bits := uint32(WorldIdentity), -1
	for _, e := range ipc {
		if e.Prefix.Contains(a) && e.Prefix.Bits() > bits {
			key, bits = e.Key, e.Prefix.Bits()
		}
	}
	return key
}

// checkPlanSides compares, for every endpoint, direction, remote address
// and target, the plan's maps (read as the programs read them) with the
// IR. It returns the number of cells compared.
func checkPlanSides(t *testing.T, lab *topology.Spec, c *policy.Compiled, plans map[string]*hostPlan, what string) int {
	t.Helper()
	remotes := append([]netip.Addr(nil), tierRemotes...)
	for _, ep := range lab.Endpoints {
		remotes = append(remotes, ep.IP)
	}
	n := 0
	for _, h := range lab.Hosts {
		hp := plans[h.Name]
		for slot, ep := range change.LocalEndpoints(lab, h.Name) {
			pe := &hp.Endpoints[slot]
			subject := c.IdentityOfIP(ep.IP)
			for _, remote := range remotes {
				if remote == ep.IP {
					continue
				}
				peer := ipcacheKey(hp.IPCache, remote)
				for _, dir := range []policy.Dir{policy.Ingress, policy.Egress} {
					for _, tg := range tierTargets {
						want := c.SideAllows(subject, dir, remote, tg.proto, tg.port)
						r, _, _ := goVerdict(pe, peer, uint8(dir), tg.proto, tg.port)
						n++
						if got := !isDrop(r); got != want {
							t.Fatalf("%s: %s %s of %s %s/%d: maps say %s, the IR allowed=%v\nrules:\n%s", what, ep.ID(), dir, remote,
								policy.ProtoName(tg.proto), tg.port, reasonName(r), want, dumpRules(c, subject, dir))
						}
					}
				}
			}
		}
	}
	return n
}

func dumpRules(c *policy.Compiled, subject uint32, dir policy.Dir) string {
	s := ""
	for _, r := range c.RulesFor(subject, dir) {
		s += fmt.Sprintf("  tier %d prec %d %s peer %d %s %s %s\n", r.Tier, r.Prec, r.Action(), r.PeerID, r.PeerCIDR, r.PortString(), r.Origin)
	}
	return s
}

// TestTiersDifferential: random policies of every tier, planned, and
// the maps read as policy_verdict reads them agree with the IR on every
// side of every pair of the lab (and the world), on single ports, ranges
// and protocols.
func TestTiersDifferential(t *testing.T) {
	lab := tierLab(t)
	rounds := 400
	if testing.Short() {
		rounds = 50
	}
	cells, tiered := 0, 0
	for seed := range rounds {
		r := rand.New(rand.NewPCG(uint64(seed), 33))
		pols := randomPolicies(r)
		c := compileTiers(t, lab, pols)
		for _, e := range c.Rules {
			if e.Tier != 0 {
				tiered++
				break
			}
		}
		plans, err := plan(lab, c)
		if err != nil {
			t.Fatal(err)
		}
		cells += checkPlanSides(t, lab, c, plans, fmt.Sprintf("seed %d", seed))
	}
	t.Logf("%d cells in %d rounds (%d with cluster-tier entries)", cells, rounds, tiered)
	if tiered < rounds/2 {
		t.Errorf("only %d of %d rounds had cluster-tier entries", tiered, rounds)
	}
}

// TestTiersChangeDifferential: a change planned from the records of the
// set before (planChange) gives the maps the IR of the set after, for
// random pairs of sets (most of which share policies).
func TestTiersChangeDifferential(t *testing.T) {
	lab := tierLab(t)
	rounds := 200
	if testing.Short() {
		rounds = 30
	}
	patched := 0
	for seed := range rounds {
		r := rand.New(rand.NewPCG(uint64(seed), 34))
		before := randomPolicies(r)
		after := append([]*policy.Policy(nil), before...)
		switch k := r.IntN(3); {
		case k == 0 && len(after) > 0:
			i := r.IntN(len(after))
			after = append(after[:i:i], after[i+1:]...)
		case k == 1 && len(after) > 0:
			i := r.IntN(len(after))
			q := *after[i]
			q.Priority = r.IntN(5)
			after[i] = &q
		default:
			for _, p := range randomPolicies(r) {
				p.Name += "-new"
				after = append(after, p)
			}
		}
		from, to := compileTiers(t, lab, before), compileTiers(t, lab, after)
		cur := records(t, lab, from)
		plans, ok, err := planChange(lab, from, to, cur)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		patched++
		checkPlanSides(t, lab, to, plans, fmt.Sprintf("change seed %d", seed))
		checkChange(t, fmt.Sprintf("change seed %d", seed), lab, from, to)
	}
	t.Logf("%d of %d changes patched", patched, rounds)
}

// TestProgTiersDifferential runs the real programs (BPF_PROG_TEST_RUN)
// on random tiered policies: an endpoint of the scenario lab's entries
// and isolation, as plan renders them, are endpoint A's, the plan's
// ipcache is the harness's, and a new TCP or UDP flow from and to every
// other address of the lab (and the world) must be counted with the
// reason policy_verdict's reading in Go gives, and pass exactly when the
// IR allows it.
func TestProgTiersDifferential(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	lab := tierLab(t)
	rounds := 16
	if testing.Short() {
		rounds = 4
	}
	sport := uint16(10000)
	cells := 0
	for seed := range rounds {
		r := rand.New(rand.NewPCG(uint64(seed), 35))
		c := compileTiers(t, lab, randomPolicies(r))
		plans, err := plan(lab, c)
		if err != nil {
			t.Fatal(err)
		}
		host := lab.Hosts[r.IntN(len(lab.Hosts))].Name
		hp := plans[host]
		slot := r.IntN(len(hp.Endpoints))
		pe := &hp.Endpoints[slot]
		subjectIP := change.LocalEndpoints(lab, host)[slot].IP
		ipc, err := buildIPCache(append(slices.Clone(hp.IPCache),
			ipEntry{Prefix: netip.PrefixFrom(epA.ip, 32), Key: epA.identity, Identity: epA.identity}))
		h.must(err)
		h.must(h.objs.CnlabIpcache.Put(uint32(0), ipc))
		ipc.Close()
		h.setEntries(0, epA, pe.Enforce&(cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS), pe.Entries)
		h.clearFlows(t)
		remotes := append([]netip.Addr(nil), tierRemotes...)
		for _, ep := range lab.Endpoints {
			if ep.IP != subjectIP {
				remotes = append(remotes, ep.IP)
			}
		}
		for _, remote := range remotes {
			peer := ipcacheKey(hp.IPCache, remote)
			for _, tg := range tierTargets {
				if tg.proto == policy.ProtoSCTP {
					continue
				}
				for _, dir := range []policy.Dir{policy.Ingress, policy.Egress} {
					sport++
					var pkt []byte
					src, dst := remote, epA.ip
					if dir == policy.Egress {
						src, dst = epA.ip, remote
					}
					if tg.proto == policy.ProtoTCP {
						pkt = tcpPkt(src, dst, sport, tg.port, tcpSYN)
					} else {
						pkt = udpPkt(src, dst, sport, tg.port)
					}
					reason, _, _ := goVerdict(pe, peer, uint8(dir), tg.proto, tg.port)
					allowed := c.SideAllows(pe.Identity, dir, remote, tg.proto, tg.port)
					if isDrop(reason) == allowed {
						t.Fatalf("seed %d: Go reading %s, IR allowed=%v", seed, reasonName(reason), allowed)
					}
					what := fmt.Sprintf("seed %d %s %s %s %s/%d", seed, pe.ID, dir, remote, policy.ProtoName(tg.proto), tg.port)
					if dir == policy.Ingress {
						act := uint32(actOK)
						if !allowed {
							act = actShot
						}
						h.toEp(t, what, pkt, act, ingress(epA, reason))
					} else {
						res := h.run(t, h.objs.CnlabFromEp, pkt)
						if (res.ret == actShot) == allowed || !slices.Equal(res.hits, []hit{egress(epA, reason)}) {
							t.Errorf("%s (from_ep): got %s, counters %v; want allowed=%v, counters %v", what, actName(res.ret), res.hits, allowed, egress(epA, reason))
						}
					}
					cells++
				}
			}
		}
		if t.Failed() {
			t.Fatalf("seed %d: rules of %s:\ningress\n%s\negress\n%s", seed, pe.ID, dumpRules(c, pe.Identity, policy.Ingress), dumpRules(c, pe.Identity, policy.Egress))
		}
	}
	t.Logf("%d packets in %d rounds", cells, rounds)
}

// tierEntry is an IR entry of a cluster tier: action "accept", "deny"
// or "pass" at rank prec.
func tierEntry(tier policy.Tier, action string, peer uint32, proto uint8, lo, hi uint16, prec uint32) policy.Entry {
	return policy.Entry{Dir: policy.Ingress, PeerID: peer, Proto: proto, PortLo: lo, PortHi: hi, Tier: tier, Prec: prec,
		Deny: action == "deny", Pass: action == "pass"}
}

func admin(action string, peer uint32, proto uint8, lo, hi uint16, prec uint32) policy.Entry {
	return tierEntry(policy.TierAdmin, action, peer, proto, lo, hi, prec)
}

func baseline(action string, peer uint32, proto uint8, lo, hi uint16, prec uint32) policy.Entry {
	return tierEntry(policy.TierBaseline, action, peer, proto, lo, hi, prec)
}

// TestProgTiers: the tiers' precedence on the real program, A's ingress
// (the entries as plan renders them: render, then proxyEntries for the
// L7 cases).
func TestProgTiers(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	type probe struct {
		from   netip.Addr
		port   uint16
		act    uint32
		reason cnlabReason
	}
	allowed := func(from netip.Addr, port uint16) probe {
		return probe{from, port, actOK, cnlabReasonR_ALLOW_POLICY}
	}
	denied := func(from netip.Addr, port uint16) probe {
		return probe{from, port, actShot, cnlabReasonR_DROP_DENY}
	}
	dflt := func(from netip.Addr, port uint16) probe {
		return probe{from, port, actShot, cnlabReasonR_DROP_DEFAULT}
	}
	unenforced := func(from netip.Addr, port uint16) probe {
		return probe{from, port, actOK, cnlabReasonR_ALLOW_UNENFORCED}
	}
	proxied := func(from netip.Addr, port uint16) probe { // allowed, for the proxy: here it came around it
		return probe{from, port, actShot, cnlabReasonR_DROP_NOT_PROXIED}
	}
	iso := cnlabIsolationISO_INGRESS
	cases := []struct {
		name    string
		enforce cnlabIsolation
		l7      []uint16
		rules   []policy.Entry
		probes  []probe
	}{
		{"Admin Deny over a NetworkPolicy allow", iso, nil,
			[]policy.Entry{admin("deny", idR, protoTCP, 80, 80, 5), allow(policy.Ingress, idR, protoTCP, 80), allow(policy.Ingress, idR2, protoTCP, 80)},
			[]probe{denied(addrR, 80), allowed(addrR2, 80), dflt(addrR, 81)}},
		{"Admin Accept over isolation", iso, nil,
			[]policy.Entry{admin("accept", idR, protoTCP, 0, 0, 3)},
			[]probe{allowed(addrR, 80), allowed(addrR, 443), dflt(addrR2, 80)}},
		{"Admin Accept over a NetworkPolicy deny", iso, nil,
			[]policy.Entry{admin("accept", idR, protoTCP, 80, 80, 3), deny(policy.Ingress, idR, protoTCP, 0)},
			[]probe{allowed(addrR, 80), denied(addrR, 81)}},
		{"Admin Accept over a CiliumNetworkPolicy deny of the wildcard peer", 0, nil,
			[]policy.Entry{admin("accept", idR, protoTCP, 80, 80, 3), deny(policy.Ingress, anyPeer, protoTCP, 80)},
			[]probe{allowed(addrR, 80), denied(addrR2, 80), denied(addrW, 80), unenforced(addrR, 81)}},
		{"wildcard Admin Accept over a peer's NetworkPolicy deny", iso, nil,
			[]policy.Entry{admin("accept", anyPeer, protoTCP, 80, 80, 3), deny(policy.Ingress, idR, protoTCP, 80)},
			[]probe{allowed(addrR, 80), allowed(addrW, 80)}},
		{"Pass into the NetworkPolicy tier", iso, nil,
			[]policy.Entry{admin("pass", idR, protoTCP, 80, 81, 1), admin("deny", anyPeer, protoTCP, 0, 0, 2), allow(policy.Ingress, idR, protoTCP, 80)},
			[]probe{allowed(addrR, 80), dflt(addrR, 81), denied(addrR, 82), denied(addrR2, 80)}},
		{"Pass into a NetworkPolicy deny", 0, nil,
			[]policy.Entry{admin("pass", idR, protoTCP, 0, 0, 1), admin("accept", idR, protoTCP, 80, 80, 2), deny(policy.Ingress, idR, protoTCP, 80)},
			[]probe{denied(addrR, 80), unenforced(addrR, 81)}},
		{"wildcard Admin Deny before the peer's Pass", iso, nil,
			[]policy.Entry{admin("deny", anyPeer, protoTCP, 80, 80, 1), admin("pass", idR, protoTCP, 80, 80, 2), allow(policy.Ingress, idR, protoTCP, 80)},
			[]probe{denied(addrR, 80)}},
		{"wildcard Admin Deny after the peer's Pass", iso, nil,
			[]policy.Entry{admin("pass", idR, protoTCP, 80, 80, 2), admin("deny", anyPeer, protoTCP, 80, 80, 3), allow(policy.Ingress, idR, protoTCP, 80)},
			[]probe{allowed(addrR, 80), denied(addrR2, 80)}},
		{"wildcard Pass before the peer's Admin Deny", iso, nil,
			[]policy.Entry{admin("pass", anyPeer, protoTCP, 80, 80, 1), admin("deny", idR, protoTCP, 80, 80, 2), allow(policy.Ingress, idR, protoTCP, 80)},
			[]probe{allowed(addrR, 80), dflt(addrR2, 80)}},
		{"Pass of the peer, the NetworkPolicy allow of the wildcard", iso, nil,
			[]policy.Entry{admin("pass", idR, protoTCP, 80, 80, 1), admin("deny", anyPeer, protoTCP, 80, 80, 2), allow(policy.Ingress, anyPeer, protoTCP, 80)},
			[]probe{allowed(addrR, 80), denied(addrR2, 80)}},
		{"Baseline deny on a subject not isolated", 0, nil,
			[]policy.Entry{baseline("accept", idR, protoTCP, 80, 80, 0), baseline("deny", anyPeer, protoTCP, 0, 0, 1)},
			[]probe{allowed(addrR, 80), denied(addrR, 81), denied(addrR2, 80)}},
		{"Baseline allow in front of its deny, a NetworkPolicy allow over both", 0, nil,
			[]policy.Entry{baseline("deny", anyPeer, protoTCP, 80, 80, 0), baseline("accept", anyPeer, protoTCP, 0, 0, 1), allow(policy.Ingress, idR2, protoTCP, 80)},
			[]probe{denied(addrR, 80), allowed(addrR, 81), allowed(addrR2, 80)}},
		{"Admin Pass into the Baseline tier", 0, nil,
			[]policy.Entry{admin("pass", idR, protoTCP, 0, 0, 1), baseline("deny", idR, protoTCP, 80, 80, 0)},
			[]probe{denied(addrR, 80), unenforced(addrR, 81)}},
		{"port ranges overlapping across tiers", iso, nil,
			[]policy.Entry{admin("accept", idR, protoTCP, 85, 85, 1), admin("deny", idR, protoTCP, 80, 90, 2), admin("pass", anyPeer, protoTCP, 88, 95, 3),
				{Dir: policy.Ingress, PeerID: idR, Proto: protoTCP, PortLo: 64, PortHi: 127}, deny(policy.Ingress, anyPeer, protoTCP, 93)},
			[]probe{allowed(addrR, 85), denied(addrR, 84), denied(addrR, 90), allowed(addrR, 91), denied(addrR, 93), allowed(addrR, 64), dflt(addrR, 128),
				dflt(addrR2, 88), denied(addrR2, 93)}},
		{"L7 port under an Admin Accept: not proxied", iso, []uint16{80},
			[]policy.Entry{admin("accept", idR, protoTCP, 80, 80, 1), allow(policy.Ingress, idR, protoTCP, 80), allow(policy.Ingress, idR2, protoTCP, 80)},
			[]probe{allowed(addrR, 80), proxied(addrR2, 80)}},
		{"L7 port under a Pass: proxied", iso, []uint16{80},
			[]policy.Entry{admin("pass", idR, protoTCP, 0, 0, 1), admin("accept", anyPeer, protoTCP, 80, 80, 2), {Dir: policy.Ingress, PeerID: idR, Proto: protoTCP, PortLo: 64, PortHi: 127}},
			[]probe{proxied(addrR, 80), allowed(addrR, 81), allowed(addrR2, 80), allowed(addrW, 80)}},
		{"L7 port, wildcard Admin Accept, peer's Pass first", 0, []uint16{80},
			[]policy.Entry{admin("pass", idR, protoTCP, 80, 80, 1), admin("accept", anyPeer, protoTCP, 0, 0, 2)},
			[]probe{proxied(addrR, 80), allowed(addrR2, 80)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i := range c.rules {
				if c.rules[i].PortLo != 0 && c.rules[i].PortHi == 0 {
					c.rules[i].PortHi = c.rules[i].PortLo
				}
			}
			es := render(c.rules...)
			if c.l7 != nil {
				es = proxyEntries(es, c.l7, c.enforce&iso != 0)
			}
			h.setEntries(0, epA, c.enforce, es)
			h.clearFlows(t)
			for i, p := range c.probes {
				h.toEp(t, fmt.Sprintf("SYN from %s to port %d", p.from, p.port), tcpPkt(p.from, epA.ip, uint16(3000+i), p.port, tcpSYN), p.act, ingress(epA, p.reason))
			}
		})
	}
}

// TestMonitorNamesTiers: an event decided by a cluster policy's rule
// names its tier, priority and action (and the rule as traces do); a
// NetworkPolicy's rule is named as before.
func TestMonitorNamesTiers(t *testing.T) {
	lab := tierLab(t)
	all := &policy.Selector{}
	anp := &policy.Policy{Kind: policy.KindAdminNP, Name: "tenants", Tier: policy.TierAdmin, Priority: 10,
		Specs: []policy.Spec{{SubjectNamespaces: all, Ingress: policy.Direction{Ordered: []policy.Rule{
			{Path: "spec.ingress[0]", AnyPeer: true, Ports: []policy.Port{{Protocol: policy.TCP, Port: 80}}, Action: policy.ActionAllow},
			{Path: "spec.ingress[1]", AnyPeer: true, Action: policy.ActionDeny}}}}}}
	banp := &policy.Policy{Kind: policy.KindBaselineNP, Name: "default", Tier: policy.TierBaseline,
		Specs: []policy.Spec{{SubjectNamespaces: all, Egress: policy.Direction{Ordered: []policy.Rule{
			{Path: "spec.egress[0]", AnyPeer: true, Action: policy.ActionDeny}}}}}}
	np := &policy.Policy{Kind: policy.KindNetworkPolicy, Namespace: "x", Name: "web", Specs: []policy.Spec{{
		Ingress: policy.Direction{Enforce: true, Allow: []policy.Rule{{Path: "spec.ingress[0]", AnyPeer: true}}}}}}
	pols := []*policy.Policy{anp, banp, np}
	c := compileTiers(t, lab, pols)
	h := &lab.Hosts[0]
	ev := func(n *namer, origin string) Event {
		return n.event(h, cnlabEvent{Rule: RuleRef(origin), Reason: uint8(cnlabReasonR_DROP_DENY)}, time.Time{})
	}
	n := newNamer(lab, c.Rules, pols)
	got := ev(n, "AdminNetworkPolicy tenants spec.ingress[1]")
	if got.Rule != "AdminNetworkPolicy tenants (Admin, priority 10) spec.ingress[1] Deny" || got.Tier != "Admin" ||
		got.Priority == nil || *got.Priority != 10 || got.Action != "Deny" {
		t.Errorf("Admin rule: %+v", got)
	}
	if got := ev(n, "AdminNetworkPolicy tenants spec.ingress[0]"); got.Action != "Allow" {
		t.Errorf("Admin Allow: %+v", got)
	}
	got = ev(n, "BaselineAdminNetworkPolicy default spec.egress[0]")
	if got.Rule != "BaselineAdminNetworkPolicy default (Baseline) spec.egress[0] Deny" || got.Tier != "Baseline" || got.Priority != nil {
		t.Errorf("Baseline rule: %+v", got)
	}
	got = ev(n, "NetworkPolicy x/web spec.ingress[0]")
	if got.Rule != "NetworkPolicy x/web spec.ingress[0]" || got.Tier != "" || got.Action != "" {
		t.Errorf("NetworkPolicy rule: %+v", got)
	}
	// Without the policies: the origin, the tier and the action.
	got = ev(newNamer(lab, c.Rules, nil), "AdminNetworkPolicy tenants spec.ingress[1]")
	if got.Rule != "AdminNetworkPolicy tenants spec.ingress[1]" || got.Tier != "Admin" || got.Action != "Deny" {
		t.Errorf("without policies: %+v", got)
	}
}
