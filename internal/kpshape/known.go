package kpshape

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// The known differences between kube-proxy (v1.37, as cnlab's local
// cluster runs it) and cnlab's proxies, for the Services of the fidelity
// test. Each edit rewrites the two shapes so that its difference is gone;
// what is left after all of them is a difference nobody listed.
// docs/services.md ("Fidelity to the real kube-proxy") lists them by name.

// IPTablesKnown are the iptables layout's.
var IPTablesKnown = []Edit{
	{"off-cluster masquerade", "kube-proxy's service chains first mark cluster-IP traffic from outside --cluster-cidr for masquerade (! -s 10.244.0.0/16 -j KUBE-MARK-MASQ); a lab has no off-cluster client and cnlab no --cluster-cidr",
		func(real, _ Shape) bool {
			return real.DropRules(keyEnds(" service", " local"), match(`^! -s \S+ -d \S+ -p \S+ --dport \d+ -j MARK-MASQ$`))
		}},
	{"affinity recorded in the DNAT rule", "kube-proxy's endpoint chain records the client (-m recent --set) in its DNAT rule; cnlab writes the record as a rule of its own just before the DNAT",
		func(_, mine Shape) bool {
			return mine.EditKeys(Contains(" endpoint "), func(_ string, rules []string) []string {
				for i := 0; i+1 < len(rules); i++ {
					if strings.HasPrefix(rules[i], "-m recent --set ") && strings.HasPrefix(rules[i+1], "-p ") {
						p := strings.Fields(rules[i+1])
						merged := strings.Join(p[:2], " ") + " " + rules[i] + " " + strings.Join(p[2:], " ")
						rules = slices.Replace(rules, i, i+2, merged)
					}
				}
				return rules
			})
		}},
	{"localhost node ports", "kube-proxy also serves node ports on 127.0.0.0/8 (route_localnet; a first KUBE-NODEPORTS rule per port, counted by nfacct); cnlab does not",
		func(real, _ Shape) bool {
			return real.DropRules(Suffix(" node port"), func(r string) bool { return strings.HasPrefix(r, "-d 127.0.0.0/8 ") })
		}},
	externalLocal("-j EXT", "-j SVL"),
	internalLocal("-j SVL", "-j SVC"),
	{"no-endpoint reject chain", "kube-proxy rejects a Service without endpoints in filter's KUBE-SERVICES (and node ports in KUBE-EXTERNAL-SERVICES); cnlab in its one CNLABSVC-REJECT chain",
		func(real, mine Shape) bool {
			a := real.EditKeys(Suffix(" no endpoints"), trimRulePrefix("SERVICES: "))
			b := mine.EditKeys(Suffix(" no endpoints"), trimRulePrefix("REJECT: "))
			return a && b
		}},
	{"filter hooks", "kube-proxy jumps from INPUT to KUBE-PROXY-FIREWALL, KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES, KUBE-FIREWALL, from FORWARD to KUBE-PROXY-FIREWALL, KUBE-FORWARD, KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, from OUTPUT to KUBE-PROXY-FIREWALL, KUBE-SERVICES, KUBE-FIREWALL; cnlab from each of the three to CNLABSVC-REJECT (NEW connections)",
		func(real, mine Shape) bool {
			want := []string{"-m conntrack --ctstate NEW -j REJECT"}
			ok := slices.Equal(mine["hook filter INPUT"], want) && slices.Equal(mine["hook filter FORWARD"], want) && slices.Equal(mine["hook filter OUTPUT"], want) &&
				len(real["hook filter INPUT"]) > 1 && len(real["hook filter FORWARD"]) > 1
			if !ok {
				return false
			}
			for _, c := range []string{"INPUT", "FORWARD", "OUTPUT"} {
				delete(real, "hook filter "+c)
				delete(mine, "hook filter "+c)
			}
			return emptyChain(real, "chain filter SERVICES") && emptyChain(mine, "chain filter REJECT")
		}},
	{"KUBE-FORWARD", "kube-proxy's filter FORWARD drops INVALID connections and accepts marked (0x4000) and established ones; cnlab leaves forwarding to the lab's policy datapath",
		drop("chain filter FORWARD")},
	{"KUBE-FIREWALL", "kube-proxy drops connections to 127.0.0.0/8 from other addresses (the guard of route_localnet); cnlab serves no localhost node port",
		drop("chain filter FIREWALL")},
	{"empty feature chains", "kube-proxy keeps KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS (health check node ports) and KUBE-PROXY-FIREWALL (load-balancer source ranges) in filter, empty here; cnlab has none of those features",
		func(real, _ Shape) bool {
			return emptyChain(real, "chain filter EXTERNAL-SERVICES") && emptyChain(real, "chain filter NODEPORTS") && emptyChain(real, "chain filter PROXY-FIREWALL")
		}},
	{"canary chains", "kube-proxy (KUBE-PROXY-CANARY) and kubelet (KUBE-KUBELET-CANARY) keep empty chains in nat and filter to notice a flush of the tables; cnlab rebuilds from its state files instead",
		func(real, _ Shape) bool {
			n := 0
			for _, k := range []string{"chain nat PROXY-CANARY", "chain filter PROXY-CANARY", "chain nat KUBELET-CANARY", "chain filter KUBELET-CANARY"} {
				if emptyChain(real, k) {
					n++
				}
			}
			return n > 0
		}},
}

// NFTKnown are the nftables layout's.
var NFTKnown = []Edit{
	{"hairpin", "kube-proxy masquerades hairpin connections in masquerading, by a set of the node's endpoints (ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections); cnlab marks them in each endpoint chain (ip saddr ADDR jump mark-for-masquerade), as both do in iptables",
		func(real, mine Shape) bool {
			// Each endpoint chain's first rule, for its own address only.
			a := mine.EditKeys(Contains(" endpoint "), func(k string, rules []string) []string {
				_, ep, _ := strings.Cut(k, " endpoint ")
				addr, _, _ := strings.Cut(ep, ":")
				if len(rules) > 0 && rules[0] == "ip saddr "+addr+" jump mark-for-masquerade" {
					return rules[1:]
				}
				// Without it the chain stays different from kube-proxy's.
				return append([]string{"(no hairpin rule)"}, rules...)
			})
			b := real.DropRules(Prefix("chain masquerading"), match(`@hairpin-connections masquerade`))
			_, c := real["set hairpin-connections"]
			delete(real, "set hairpin-connections")
			return a && b && c
		}},
	{"endpoints inline", "without affinity kube-proxy writes no endpoint chain: the service chain DNATs itself (dnat to ADDR:PORT, or dnat ip to numgen random mod N map { i : ADDR . PORT }); cnlab goes to an endpoint chain per endpoint (goto, or numgen random mod N vmap { i : goto endpoint })",
		func(_, mine Shape) bool { return inlineEndpoints(mine) }},
	{"mark chain", "kube-proxy sets the masquerade bit inline (meta mark set meta mark | 0x4000); cnlab jumps to a chain mark-for-masquerade that does, as in its iptables layout",
		func(_, mine Shape) bool {
			if _, ok := mine["chain mark-for-masquerade"]; !ok {
				return false
			}
			delete(mine, "chain mark-for-masquerade")
			mine.EditKeys(func(string) bool { return true }, func(_ string, rules []string) []string {
				for i, r := range rules {
					rules[i] = strings.ReplaceAll(r, "jump mark-for-masquerade", "meta mark set meta mark | 0x00004000")
				}
				return rules
			})
			return true
		}},
	{"masquerade rule", "kube-proxy masquerades in one rule (meta mark & 0x4000 != 0 meta mark set meta mark ^ 0x4000 masquerade fully-random); cnlab in three (return unless marked, clear the bit, masquerade), as its iptables layout",
		func(real, mine Shape) bool {
			want := []string{"meta mark & 0x00004000 == 0x00000000 return", "meta mark set meta mark ^ 0x00004000", "masquerade fully-random"}
			if !slices.Equal(mine["chain masquerading"], want) || len(real["chain masquerading"]) == 0 {
				return false
			}
			mine["chain masquerading"] = slices.Clone(real["chain masquerading"])
			return true
		}},
	{"affinity timeout", "kube-proxy gives each affinity set its timeout (timeout 30s) and updates it with { ip saddr }; cnlab writes the timeout in the update ({ ip saddr timeout 30s }), so that a changed timeout is a chain rewrite",
		func(real, mine Shape) bool {
			a := real.DropRules(Contains(" affinity "), match(`^timeout \d+s$`))
			b := mine.EditKeys(Contains(" endpoint "), func(_ string, rules []string) []string {
				for i, r := range rules {
					rules[i] = regexp.MustCompile(`\{ ip saddr timeout \d+s \}`).ReplaceAllString(r, "{ ip saddr }")
				}
				return rules
			})
			return a && b
		}},
	{"off-cluster masquerade", "kube-proxy's services chain first marks traffic to a cluster IP from outside --cluster-cidr (ip daddr @cluster-ips ip saddr != 10.244.0.0/16 meta mark set ...); cnlab has no --cluster-cidr",
		func(real, _ Shape) bool {
			return real.DropRules(Prefix("chain services"), match(`^ip daddr @cluster-ips ip saddr != \S+ meta mark set`))
		}},
	{"cluster-ips-check", "kube-proxy rejects connections to a cluster IP's unserved ports and drops those to unallocated cluster IPs (chain cluster-ips-check, set cluster-ips, from forward and output); cnlab does not",
		func(real, _ Shape) bool {
			_, a := real["chain cluster-ips-check"]
			_, b := real["set cluster-ips"]
			delete(real, "chain cluster-ips-check")
			delete(real, "set cluster-ips")
			c := real.DropRules(Prefix("chain filter-"), func(r string) bool { return r == "ct state new jump cluster-ips-check" })
			return a && b && c
		}},
	{"firewall", "kube-proxy has LoadBalancer source-range chains (filter-prerouting-pre-dnat, filter-output-pre-dnat, firewall-check, map firewall-ips), empty here; cnlab has no LoadBalancer",
		func(real, _ Shape) bool {
			n := 0
			for _, k := range []string{"chain filter-prerouting-pre-dnat", "chain filter-output-pre-dnat", "chain firewall-check", "map firewall-ips"} {
				if _, ok := real[k]; ok {
					n++
					delete(real, k)
				}
			}
			return n > 0
		}},
	{"node-port addresses", "kube-proxy takes node ports on the node's addresses (ip daddr @nodeport-ips, set nodeport-ips, --nodeport-addresses); cnlab on every local address (fib daddr type local), as kube-proxy's iptables mode does",
		func(real, _ Shape) bool {
			_, a := real["set nodeport-ips"]
			delete(real, "set nodeport-ips")
			b := real.EditKeys(Prefix("chain "), func(_ string, rules []string) []string {
				for i, r := range rules {
					rules[i] = strings.ReplaceAll(r, "ip daddr @nodeport-ips meta l4proto", "fib daddr type local meta l4proto")
				}
				return rules
			})
			return a && b
		}},
	{"endpoints-check chains", "kube-proxy checks for Services without endpoints in service-endpoints-check (input, forward, output) and nodeport-endpoints-check (input) at priority filter; cnlab in one endpoints-check with both lookups, from input, forward and output, at priority filter - 10 (before the nftables policy datapath's forward chain)",
		func(real, mine Shape) bool {
			svc, np := real["chain service-endpoints-check"], real["chain nodeport-endpoints-check"]
			if len(svc) != 1 || len(np) != 1 || !slices.Equal(mine["chain endpoints-check"], append(slices.Clone(svc), np...)) {
				return false
			}
			delete(real, "chain service-endpoints-check")
			delete(real, "chain nodeport-endpoints-check")
			delete(mine, "chain endpoints-check")
			for _, c := range []string{"filter-input", "filter-forward", "filter-output"} {
				want := []string{fmt.Sprintf("hook: type filter hook %s priority filter - 10; policy accept;", strings.TrimPrefix(c, "filter-")), "ct state new jump endpoints-check"}
				if !slices.Equal(mine["chain "+c], want) {
					return false
				}
				delete(real, "chain "+c)
				delete(mine, "chain "+c)
			}
			return true
		}},
	externalLocal("goto EXT", "goto SVL"),
	internalLocal("goto SVL", "goto SVC"),
}

// externalLocal is the externalTrafficPolicy Local difference, in either
// layout (toExt, toLocal: a rule's jump to the external and local chain).
func externalLocal(toExt, toLocal string) Edit {
	return Edit{"externalTrafficPolicy Local", "kube-proxy's node port goes to an external chain that sends pod traffic (from --cluster-cidr) and the node's own traffic (masqueraded) to the cluster-wide chain, the rest to the node's endpoints; cnlab's node port goes straight to the chain of the node's endpoints",
		func(real, mine Shape) bool {
			found := false
			for _, f := range real.Frontends() {
				ext := real[f+" external"]
				if len(ext) < 2 || !strings.HasSuffix(ext[len(ext)-1], toLocal) || mine[f+" external"] != nil {
					continue
				}
				delete(real, f+" external")
				real.EditKeys(Prefix(f+" node port"), func(_ string, rules []string) []string {
					for i, r := range rules {
						rules[i] = strings.Replace(r, toExt, toLocal, 1)
					}
					return rules
				})
				found = true
			}
			return found
		}}
}

// internalLocal is the internalTrafficPolicy Local difference, in either
// layout.
func internalLocal(toLocal, toSvc string) Edit {
	return Edit{"internalTrafficPolicy Local", "kube-proxy sends the cluster IP of a Service with internalTrafficPolicy Local to a local chain (KUBE-SVL- / local-) over the node's endpoints; cnlab to its usual service chain, which holds only the node's endpoints",
		func(real, mine Shape) bool {
			found := false
			for _, f := range real.Frontends() {
				_, hasSvc := real[f+" service"]
				local, hasLocal := real[f+" local"]
				if hasSvc || !hasLocal || mine[f+" local"] != nil || mine[f+" service"] == nil {
					continue
				}
				delete(real, f+" local")
				real[f+" service"] = local
				real.EditKeys(Prefix(f+" dispatch"), func(_ string, rules []string) []string {
					for i, r := range rules {
						rules[i] = strings.Replace(r, toLocal, toSvc, 1)
					}
					return rules
				})
				found = true
			}
			return found
		}}
}

var (
	sepRE    = regexp.MustCompile(`SEP\(([0-9.]+:\d+)\)`)
	gotoRE   = regexp.MustCompile(`^goto SEP\(([0-9.]+:\d+)\)$`)
	numgenRE = regexp.MustCompile(`^numgen random mod (\d+) vmap \{ (.*) \}$`)
	pickRE   = regexp.MustCompile(`^(\d+) : goto SEP\(([0-9.]+:\d+)\)$`)
)

// inlineEndpoints rewrites cnlab's service and local chains that only
// pick an endpoint chain, whose endpoint chains only DNAT, into
// kube-proxy's inline DNAT, and drops the endpoint chains nothing refers
// to any more.
func inlineEndpoints(s Shape) bool {
	found := false
	dnatRE := regexp.MustCompile(`^meta l4proto (\S+) dnat to (\S+)$`)
	for _, f := range s.Frontends() {
		for _, part := range []string{" service", " local"} {
			rules, ok := s[f+part]
			if !ok || len(rules) != 1 {
				continue
			}
			// "goto SEP(a)", or "numgen random mod N vmap { i : goto SEP(a), ... }":
			// the modulus and indices are kept as they are.
			mod, picks := "", []string(nil)
			if m := gotoRE.FindStringSubmatch(rules[0]); m != nil {
				picks = []string{"", m[1]}
			} else if m := numgenRE.FindStringSubmatch(rules[0]); m != nil {
				mod = m[1]
				for _, e := range strings.Split(m[2], ", ") {
					p := pickRE.FindStringSubmatch(e)
					if p == nil {
						picks = nil
						break
					}
					picks = append(picks, p[1], p[2])
				}
			}
			if len(picks) == 0 {
				continue
			}
			var proto string
			var elems []string
			okAll := true
			for i := 0; i < len(picks); i += 2 {
				ep := s[f+" endpoint "+picks[i+1]]
				d := (([]string)(nil))
				if len(ep) == 1 {
					d = dnatRE.FindStringSubmatch(ep[0])
				}
				if d == nil || (proto != "" && d[1] != proto) {
					okAll = false
					break
				}
				proto = d[1]
				elems = append(elems, fmt.Sprintf("%s : %s", picks[i], strings.Replace(d[2], ":", " . ", 1)))
			}
			if !okAll {
				continue
			}
			if mod == "" {
				s[f+part] = []string{fmt.Sprintf("meta l4proto %s dnat to %s", proto, strings.Replace(strings.TrimPrefix(elems[0], " : "), " . ", ":", 1))}
			} else {
				s[f+part] = []string{fmt.Sprintf("meta l4proto %s dnat ip to numgen random mod %s map { %s }", proto, mod, strings.Join(elems, ", "))}
			}
			found = true
		}
	}
	// Endpoint chains nothing goes to any more.
	refs := map[string]bool{}
	for _, rules := range s {
		for _, r := range rules {
			for _, m := range sepRE.FindAllStringSubmatch(r, -1) {
				refs[m[1]] = true
			}
		}
	}
	for _, k := range s.Keys() {
		if _, ep, ok := strings.Cut(k, " endpoint "); ok && !refs[ep] {
			delete(s, k)
		}
	}
	return found
}

func keyEnds(suffixes ...string) func(string) bool {
	return func(k string) bool {
		for _, s := range suffixes {
			if strings.HasSuffix(k, s) {
				return true
			}
		}
		return false
	}
}

func match(re string) func(string) bool {
	r := regexp.MustCompile(re)
	return r.MatchString
}

func trimRulePrefix(p string) func(string, []string) []string {
	return func(_ string, rules []string) []string {
		for i, r := range rules {
			rules[i] = strings.TrimPrefix(r, p)
		}
		return rules
	}
}

// emptyChain deletes key from s when it is there and empty, and says so.
func emptyChain(s Shape, key string) bool {
	r, ok := s[key]
	if !ok || len(r) != 0 {
		return false
	}
	delete(s, key)
	return true
}

// drop is an edit deleting key from the real side.
func drop(key string) func(real, mine Shape) bool {
	return func(real, _ Shape) bool {
		_, ok := real[key]
		delete(real, key)
		return ok
	}
}
