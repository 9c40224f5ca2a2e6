package policy

import (
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/internal/scenarios"
)

const npHead = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\n"
const cnpHead = "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: c, namespace: x}\n"

func TestParseBadInput(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"empty", "", "f.yaml: no policy documents"},
		{"syntax", "kind: [", "f.yaml: "},
		{"not a mapping", "- a", "f.yaml: document 1: a policy document must be a mapping"},
		{"alias", npHead + "spec: {podSelector: &s {}, ingress: [{from: [{podSelector: *s}]}]}\n", "f.yaml: spec.ingress[0].from[0].podSelector: aliases (*s) are not supported"},
		{"no kind", "apiVersion: v1\n", "f.yaml: document 1: kind: is required"},
		{"unknown kind", "apiVersion: v1\nkind: Service\n", `f.yaml: document 1: kind: "Service" is not supported (NetworkPolicy, CiliumNetworkPolicy, ClusterNetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy)`},
		{"Service to service apply", "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: x}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n",
			`f.yaml: document 1: kind: "Service" is not supported (NetworkPolicy, CiliumNetworkPolicy, ClusterNetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy): apply Service documents with cnlab service apply`},
		{"EndpointSlice to service apply", npHead + "spec: {podSelector: {}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: x, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [10.0.0.1]}]\n",
			`f.yaml: document 2: kind: "EndpointSlice" is not supported (NetworkPolicy, CiliumNetworkPolicy, ClusterNetworkPolicy, AdminNetworkPolicy, BaselineAdminNetworkPolicy): apply EndpointSlice documents with cnlab service apply`},
		{"wrong apiVersion", "apiVersion: networking.k8s.io/v1beta1\nkind: NetworkPolicy\n", `apiVersion: "networking.k8s.io/v1beta1" is not the apiVersion of NetworkPolicy (want networking.k8s.io/v1)`},
		{"no name", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {}\n", "metadata.name: is required"},
		{"bad name", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: Bad_Name}\n", `metadata.name: "Bad_Name" must be at most 253`},
		{"unknown top field", npHead + "spce: {}\n", `f.yaml: document 1: spce: unknown field "spce"`},
		{"no spec", npHead, "document 1 (NetworkPolicy x/p): spec: is required"},
		{"no podSelector", npHead + "spec: {ingress: []}\n", "spec.podSelector: is required (use {} to select every pod of the namespace)"},
		{"unknown spec field", npHead + "spec: {podSelector: {}, ingres: []}\n", `spec.ingres: unknown field "ingres" (known fields: egress, ingress, podSelector, policyTypes)`},
		{"bad policyType", npHead + "spec: {podSelector: {}, policyTypes: [Inbound]}\n", `spec.policyTypes[0]: unknown policy type "Inbound" (Ingress, Egress)`},
		{"ignored rules", npHead + "spec: {podSelector: {}, policyTypes: [Egress], ingress: [{}]}\n", "spec.ingress: has rules but spec.policyTypes does not list Ingress"},
		{"bad label key", npHead + "spec: {podSelector: {matchLabels: {'a b': c}}}\n", `spec.podSelector.matchLabels: label key "a b"`},
		{"bad operator", npHead + "spec: {podSelector: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}}\n", `spec.podSelector.matchExpressions[0].operator: unknown operator "Equals"`},
		{"In without values", npHead + "spec: {podSelector: {matchExpressions: [{key: a, operator: In}]}}\n", "matchExpressions[0].values: must not be empty for operator In"},
		{"Exists with values", npHead + "spec: {podSelector: {matchExpressions: [{key: a, operator: Exists, values: [b]}]}}\n", "matchExpressions[0].values: must be empty for operator Exists"},
		{"empty peer", npHead + "spec: {podSelector: {}, ingress: [{from: [{}]}]}\n", "spec.ingress[0].from[0]: a peer needs podSelector, namespaceSelector or ipBlock"},
		{"ipBlock and selector", npHead + "spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]}]}\n", "spec.ingress[0].from[0]: ipBlock cannot be combined"},
		{"bad cidr", npHead + "spec: {podSelector: {}, egress: [{to: [{ipBlock: {cidr: 10.0.0.0/40}}]}]}\n", `spec.egress[0].to[0].ipBlock.cidr: "10.0.0.0/40" is not a CIDR`},
		{"ipv6 cidr without length", npHead + "spec: {podSelector: {}, egress: [{to: [{ipBlock: {cidr: 'fd00::1'}}]}]}\n", `spec.egress[0].to[0].ipBlock.cidr: "fd00::1" needs a prefix length (e.g. fd00::1/128)`},
		{"ipv6 bad cidr", npHead + "spec: {podSelector: {}, egress: [{to: [{ipBlock: {cidr: 'fd00::/129'}}]}]}\n", `spec.egress[0].to[0].ipBlock.cidr: "fd00::/129" is not a CIDR`},
		{"ipv4-mapped cidr", npHead + "spec: {podSelector: {}, egress: [{to: [{ipBlock: {cidr: '::ffff:10.0.0.0/104'}}]}]}\n", "spec.egress[0].to[0].ipBlock.cidr: ::ffff:10.0.0.0/104 is an IPv4-mapped IPv6 prefix: write the IPv4 CIDR (10.0.0.0/8)"},
		{"ipv6 except of ipv4 cidr", npHead + "spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: ['fd00::/64']}}]}]}\n", "f.yaml: document 1 (NetworkPolicy x/p): spec.ingress[0].from[0].ipBlock.except[0]: fd00::/64 is IPv6 but cidr 10.0.0.0/8 is IPv4: an except entry must be of its cidr's family"},
		{"ipv4 except of ipv6 cidr", npHead + "spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 'fd00::/16', except: [10.0.0.0/8]}}]}]}\n", "spec.ingress[0].from[0].ipBlock.except[0]: 10.0.0.0/8 is IPv4 but cidr fd00::/16 is IPv6"},
		{"ipv6 except outside", npHead + "spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 'fd00:0:191::/64', except: ['fd00:0:192::/80']}}]}]}\n", "spec.ingress[0].from[0].ipBlock.except[0]: fd00:0:192::/80 is not strictly inside fd00:0:191::/64"},
		{"ipv6 except not strictly inside", npHead + "spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 'fd00::/64', except: ['fd00::/64']}}]}]}\n", "except[0]: fd00::/64 is not strictly inside fd00::/64"},
		{"cnp cidrset ipv6 except of ipv4", cnpHead + "spec: {endpointSelector: {}, egress: [{toCIDRSet: [{cidr: 10.0.0.0/8, except: ['fd00::1']}]}]}\n", "spec.egress[0].toCIDRSet[0].except[0]: fd00::1/128 is IPv6 but cidr 10.0.0.0/8 is IPv4"},
		{"cnp bad ipv6 toCIDR", cnpHead + "spec: {endpointSelector: {}, egress: [{toCIDR: ['fd00::/200']}]}\n", `spec.egress[0].toCIDR[0]: "fd00::/200" is not a CIDR`},
		{"except outside", npHead + "spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.1.0.0/24]}}]}]}\n", "spec.ingress[0].from[0].ipBlock.except[0]: 10.1.0.0/24 is not strictly inside 10.0.0.0/16"},
		{"bad protocol", npHead + "spec: {podSelector: {}, ingress: [{ports: [{protocol: ICMP}]}]}\n", `spec.ingress[0].ports[0].protocol: unknown protocol "ICMP" (TCP, UDP, SCTP)`},
		{"lower-case protocol", npHead + "spec: {podSelector: {}, ingress: [{ports: [{protocol: tcp, port: 80}]}]}\n", `unknown protocol "tcp"`},
		{"port zero", npHead + "spec: {podSelector: {}, ingress: [{ports: [{port: 0}]}]}\n", "spec.ingress[0].ports[0].port: 0 is not a port number (1-65535)"},
		{"port too big", npHead + "spec: {podSelector: {}, ingress: [{ports: [{port: 70000}]}]}\n", "70000 is not a port number"},
		{"bad port name", npHead + "spec: {podSelector: {}, ingress: [{ports: [{port: HTTP_PORT}]}]}\n", `spec.ingress[0].ports[0].port: port name "HTTP_PORT"`},
		{"endPort below port", npHead + "spec: {podSelector: {}, ingress: [{ports: [{port: 90, endPort: 80}]}]}\n", "spec.ingress[0].ports[0].endPort: 80 must be between port 90 and 65535"},
		{"endPort with name", npHead + "spec: {podSelector: {}, ingress: [{ports: [{port: web, endPort: 80}]}]}\n", `endPort: cannot be used with the named port "web"`},
		{"endPort without port", npHead + "spec: {podSelector: {}, ingress: [{ports: [{endPort: 80}]}]}\n", "endPort: needs a numeric port"},
		{"float port", npHead + "spec: {podSelector: {}, ingress: [{ports: [{port: 80, endPort: 81.5}]}]}\n", `endPort: expected an integer, got "81.5"`},
		{"duplicate policy", npHead + "spec: {podSelector: {}}\n---\n" + npHead + "spec: {podSelector: {}}\n", "document 2 (NetworkPolicy x/p): metadata.name: NetworkPolicy x/p is defined twice in this file (also document 1)"},
		{"second document bad", npHead + "spec: {podSelector: {}}\n---\nkind: Pod\n", `f.yaml: document 2: kind: "Pod" is not supported`},
		{"cnp no selector", cnpHead + "spec: {ingress: [{}]}\n", "spec.endpointSelector: is required"},
		{"cnp no rules", cnpHead + "spec: {endpointSelector: {}}\n", "spec: has no ingress, ingressDeny, egress or egressDeny rules"},
		{"cnp cidr and cidrset", cnpHead + "spec: {endpointSelector: {}, ingress: [{fromCIDR: [10.0.0.0/8], fromCIDRSet: [{cidr: 10.0.0.0/8}]}]}\n", "spec.ingress[0]: combining fromCIDR and fromCIDRSet in one rule is not supported"},
		{"cnp empty port", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{protocol: TCP}]}]}]}\n", `spec.ingress[0].toPorts[0].ports[0].port: is required (use "0" for any port)`},
		{"cnp leading zero", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '080'}]}]}]}\n", `spec.ingress[0].toPorts[0].ports[0].port: "080" has a leading zero`},
		{"cnp lower-case protocol", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: tcp}]}]}]}\n", `unknown protocol "tcp" (TCP, UDP, SCTP, ANY)`},
		{"cnp L7 in deny", cnpHead + "spec: {endpointSelector: {}, ingressDeny: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{}]}}]}]}\n", "spec.ingressDeny[0].toPorts[0].rules: L7 rules are not allowed in a deny rule"},
		{"cnp L7 egress", cnpHead + "spec: {endpointSelector: {}, egress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{}]}}]}]}\n", "spec.egress[0].toPorts[0].rules: egress L7 rules are not supported yet"},
		{"cnp L7 UDP", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: UDP}], rules: {http: [{}]}}]}]}\n", "spec.ingress[0].toPorts[0].ports[0].protocol: L7 rules apply to TCP only (Cilium refuses UDP"},
		{"cnp L7 ANY", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80'}], rules: {http: [{method: GET}]}}]}]}\n", "spec.ingress[0].toPorts[0].ports[0].protocol: L7 rules apply to TCP only (Cilium refuses ANY"},
		{"cnp L7 port 0", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '0', protocol: TCP}], rules: {http: [{}]}}]}]}\n", "spec.ingress[0].toPorts[0].ports[0].port: port 0 (any port) cannot carry L7 rules"},
		{"cnp L7 no ports", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{rules: {http: [{}]}}]}]}\n", "spec.ingress[0].toPorts[0].ports: is required with rules"},
		{"cnp L7 range", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', endPort: 90, protocol: TCP}], rules: {http: [{}]}}]}]}\n", "ports[0].endPort: port ranges with L7 rules are not supported yet"},
		{"cnp L7 kafka", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {kafka: [{topic: t}]}}]}]}\n", "spec.ingress[0].toPorts[0].rules.kafka: is not supported (cnlab's proxy enforces http rules only)"},
		{"cnp L7 dns", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {dns: [{matchName: x}]}}]}]}\n", "rules.dns: is not supported"},
		{"cnp L7 l7proto", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {l7proto: envoy.foo}}]}]}\n", "rules.l7proto: is not supported"},
		{"cnp L7 no http", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {}}]}]}\n", "spec.ingress[0].toPorts[0].rules: has no http:"},
		{"cnp L7 empty http", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: []}}]}]}\n", "spec.ingress[0].toPorts[0].rules.http: is empty"},
		{"cnp L7 unknown field", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{methd: GET}]}}]}]}\n", "unknown field \"methd\""},
		{"cnp L7 bad path", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{path: '/a(b'}]}}]}]}\n", "spec.ingress[0].toPorts[0].rules.http[0].path: "},
		{"cnp L7 bad method", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{method: '[G'}]}}]}]}\n", "rules.http[0].method: "},
		{"cnp L7 bad header", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{headers: ['']}]}}]}]}\n", "rules.http[0].headers[0]: "},
		{"cnp L7 mismatch", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{headerMatches: [{name: X, value: v, mismatch: LOG}]}]}}]}]}\n", "rules.http[0].headerMatches[0].mismatch: \"LOG\" is not supported"},
		{"cnp L7 secret", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{headerMatches: [{name: X, secret: {name: s}}]}]}}]}]}\n", "rules.http[0].headerMatches[0].secret: is not supported"},
		{"cnp L7 headerMatch no name", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: TCP}], rules: {http: [{headerMatches: [{value: v}]}]}}]}]}\n", "rules.http[0].headerMatches[0].name: is required"},
		{"cnp L7 TLS", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '443', protocol: TCP}], terminatingTLS: {secret: {name: s}}, rules: {http: [{}]}}]}]}\n", "spec.ingress[0].toPorts[0].terminatingTLS: TLS interception and listeners are not supported"},
		{"cnp fqdn", cnpHead + "spec: {endpointSelector: {}, egress: [{toFQDNs: [{matchName: example.com}]}]}\n", "spec.egress[0].toFQDNs: is not supported yet"},
		{"cnp entities", cnpHead + "spec: {endpointSelector: {}, ingress: [{fromEntities: [world]}]}\n", "spec.ingress[0].fromEntities: is not supported yet"},
		{"cnp node selector", cnpHead + "spec: {nodeSelector: {}}\n", "spec.nodeSelector: host policies (nodeSelector) are not supported yet"},
		{"cnp mixed L3", cnpHead + "spec: {endpointSelector: {}, ingress: [{fromEndpoints: [{}], fromCIDR: [10.0.0.0/8]}]}\n", "spec.ingress[0]: combining fromEndpoints and fromCIDR in one rule is not supported"},
		{"cnp bad source", cnpHead + "spec: {endpointSelector: {matchLabels: {'reserved:host': ''}}}\n", `spec.endpointSelector.matchLabels: label source "reserved:" in "reserved:host" is not supported`},
		{"cnp bad protocol", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '80', protocol: ICMP}]}]}]}\n", `spec.ingress[0].toPorts[0].ports[0].protocol: unknown protocol "ICMP" (TCP, UDP, SCTP, ANY)`},
		{"cnp bad port", cnpHead + "spec: {endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: '99999'}]}]}]}\n", "spec.ingress[0].toPorts[0].ports[0].port: 99999 is not a port number"},
		{"cnp bad except", cnpHead + "spec: {endpointSelector: {}, egress: [{toCIDRSet: [{cidr: 10.0.0.0/24, except: [10.0.0.0/16]}]}]}\n", "spec.egress[0].toCIDRSet[0].except[0]: 10.0.0.0/16 is not strictly inside 10.0.0.0/24"},
		{"cnp specs empty", cnpHead + "specs: []\n", "specs: must be a non-empty list"},
		{"np with specs", npHead + "specs: []\n", "a NetworkPolicy has spec:, not specs:"},
		{"bad namespace", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: Bad}\nspec: {podSelector: {}}\n", `metadata.namespace: "Bad" must consist`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "f.yaml")
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !input.Is(err) {
				t.Errorf("%T is not an input.Error", err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got  %s\nwant one line containing %s", err, tc.want)
			}
		})
	}
}

func TestNamespaceMustExist(t *testing.T) {
	pols, err := Parse([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: prod}\nspec: {podSelector: {}}\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewModel(scenarioLab(t), pols)
	if err == nil || !strings.Contains(err.Error(), `f.yaml: document 1 (NetworkPolicy prod/p): metadata.namespace: namespace "prod" does not exist in lab scen (namespaces: default, x, y, z)`) {
		t.Errorf("got %v", err)
	}
}

func TestCiliumSpecAndSpecsAddUp(t *testing.T) {
	pols, err := Parse([]byte(cnpHead+"spec: {endpointSelector: {}, ingress: [{}]}\nspecs: [{endpointSelector: {}, egress: [{}]}]\n"), "f.yaml")
	if err != nil || len(pols[0].Specs) != 2 {
		t.Fatalf("spec + specs: %v", err)
	}
}

// "podSelector:" with no value is null, which the API server reads as
// {}: every pod of the namespace. Leaving podSelector out is refused.
func TestNullPodSelectorSelectsEveryPod(t *testing.T) {
	pols, err := Parse([]byte(npHead+"spec:\n  podSelector:\n  policyTypes: [Ingress]\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s := pols[0].Specs[0]; !s.Subject.Empty() || !s.Ingress.Enforce {
		t.Errorf("%+v", s)
	}
	checkRoundTrip(t, []byte(npHead+"spec:\n  podSelector:\n"))
}

func TestParseDefaults(t *testing.T) {
	pols, err := Parse([]byte(npHead+"spec:\n  podSelector: {}\n  egress:\n  - ports: [{port: 53, protocol: UDP}]\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := pols[0].Specs[0]
	if !s.Ingress.Enforce || !s.Egress.Enforce {
		t.Errorf("policyTypes defaulting: ingress %v egress %v, want both", s.Ingress.Enforce, s.Egress.Enforce)
	}
	pols, _ = Parse([]byte(npHead+"spec:\n  podSelector: {}\n  ingress: [{}]\n"), "f.yaml")
	if s := pols[0].Specs[0]; !s.Ingress.Enforce || s.Egress.Enforce || !s.Ingress.Allow[0].AnyPeer {
		t.Errorf("ingress-only defaulting: %+v", s)
	}
	pols, _ = Parse([]byte(cnpHead+"spec:\n  endpointSelector: {}\n  egressDeny: [{toCIDR: [10.0.0.0/8]}]\n"), "f.yaml")
	if s := pols[0].Specs[0]; s.Ingress.Enforce || !s.Egress.Enforce {
		t.Errorf("cilium default deny from egressDeny: %+v", s)
	}
}

// FuzzParse feeds the parser mutations of every scenario's policies (IPv6
// CIDRs among them): it must never panic, and what it accepts must compile
// on the scenario lab and on its dual-stack twin, where the IR must agree
// with the model over both families on a few connections.
func FuzzParse(f *testing.F) {
	for _, sc := range scenarios.All {
		f.Add([]byte(sc.Policies))
	}
	f.Add([]byte(npHead + "spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 'fd00:0:191::/64', except: ['fd00:0:191::20/126']}}, {ipBlock: {cidr: 10.0.0.0/8}}]}]}\n"))
	f.Add([]byte(cnpHead + "spec: {endpointSelector: {}, egress: [{toCIDRSet: [{cidr: '::/0', except: ['fd00::/8']}]}, {toCIDR: ['2001:db8::1']}]}\n"))
	lab, dual := scenarioLab(f), labOf(f, 4, 6)
	f.Fuzz(func(t *testing.T, data []byte) {
		pols, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if !input.Is(err) {
				t.Fatalf("error %T is not an input.Error: %v", err, err)
			}
			return
		}
		m, err := NewModel(lab, pols)
		if err != nil {
			return // e.g. a namespace the lab does not have
		}
		_, _ = m.Compile()
		md, err := NewModel(dual, pols)
		if err != nil {
			t.Fatalf("the IPv4 lab takes the policies, the dual-stack one: %v", err)
		}
		c, err := md.Compile()
		if err != nil {
			return
		}
		for _, pair := range [][2]int{{0, 1}, {3, 0}, {4, 8}} {
			src, dst := &dual.Endpoints[pair[0]], &dual.Endpoints[pair[1]]
			for _, fam := range []int{4, 6} {
				v, _ := md.VerdictFamily(src, dst, fam, TCP, 80)
				sa, _ := src.Addr(fam)
				da, _ := dst.Addr(fam)
				if got := c.Allows(sa, da, ProtoTCP, 80); got != v.Allowed {
					t.Fatalf("%s -> %s tcp/80 over IPv%d: IR %v, model %v (%s; %s)", src.ID(), dst.ID(), fam, got, v.Allowed, v.Egress.Reason, v.Ingress.Reason)
				}
			}
		}
	})
}

func TestRawIsEachDocument(t *testing.T) {
	src := "# leading comment\n" + npHead + "spec: {podSelector: {}} # keep me\n---\n---\n# only a comment\n---\n" +
		strings.Replace(npHead, "name: p", "name: q", 1) + "spec: {podSelector: {}}\n...\n"
	pols, err := Parse([]byte(src), "f.yaml")
	if err != nil || len(pols) != 2 {
		t.Fatalf("%v %d", err, len(pols))
	}
	// Comments are not stored: yaml.v3 does not always place them back
	// where they were.
	if strings.Contains(pols[0].Raw, "#") || !strings.Contains(pols[0].Raw, "name: p") || strings.Contains(pols[0].Raw, "name: q") {
		t.Errorf("raw 0: %q", pols[0].Raw)
	}
	if !strings.Contains(pols[1].Raw, "name: q") || strings.Contains(pols[1].Raw, "---") {
		t.Errorf("raw 1: %q", pols[1].Raw)
	}
	// Stored policies parse back to the same set.
	again, err := Parse([]byte(pols[0].Raw+"---\n"+pols[1].Raw), "stored.yaml")
	if err != nil || len(again) != 2 || again[1].Name != "q" {
		t.Errorf("re-parse: %v", err)
	}
}

// A policy given twice in one apply is refused, naming both files; the same
// name under another kind or namespace is another policy.
func TestMergeRefusesDuplicates(t *testing.T) {
	doc := func(kind, ns, name string) string {
		api := "networking.k8s.io/v1"
		if kind == "CiliumNetworkPolicy" {
			api = "cilium.io/v2"
		}
		spec := "spec: {podSelector: {}}"
		if kind == "CiliumNetworkPolicy" {
			spec = "spec: {endpointSelector: {}, ingress: [{}]}"
		}
		return "apiVersion: " + api + "\nkind: " + kind + "\nmetadata: {name: " + name + ", namespace: " + ns + "}\n" + spec + "\n"
	}
	parse := func(file, yaml string) []*Policy {
		t.Helper()
		ps, err := Parse([]byte(yaml), file)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	a := parse("a.yaml", doc("NetworkPolicy", "x", "web"))
	b := parse("b.yaml", doc("NetworkPolicy", "y", "web")+"---\n"+doc("CiliumNetworkPolicy", "x", "web"))
	got, err := Merge(a, b)
	if err != nil || len(got) != 3 {
		t.Fatalf("distinct policies: %d, %v", len(got), err)
	}
	c := parse("c.yaml", doc("NetworkPolicy", "x", "web"))
	_, err = Merge(a, b, c)
	if !input.Is(err) || !strings.Contains(err.Error(), "c.yaml") || !strings.Contains(err.Error(), "also defined in a.yaml") {
		t.Fatalf("duplicate: %v", err)
	}
}
