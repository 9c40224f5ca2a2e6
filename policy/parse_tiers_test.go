package policy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/topology"
)

const (
	cnpTierHead  = "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {name: c}\n"
	anpHead      = "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: a}\n"
	banpHead     = "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: BaselineAdminNetworkPolicy\nmetadata: {name: default}\n"
	cnpDocPrefix = "f.yaml: document 1 (ClusterNetworkPolicy c): "
	anpDocPrefix = "f.yaml: document 1 (AdminNetworkPolicy a): "
	banpPrefix   = "f.yaml: document 1 (BaselineAdminNetworkPolicy default): "
)

// Good documents of each kind, one per feature, and what they parse to.
var tierGood = []struct {
	name, yaml string
	want       Policy
}{
	{"ClusterNetworkPolicy, Admin tier, every peer and protocol", cnpTierHead + `spec:
  tier: Admin
  priority: 10
  subject:
    namespaces: {matchLabels: {tenant: a}}
  ingress:
  - name: deny-b
    action: Deny
    from:
    - namespaces: {matchLabels: {tenant: b}}
    - pods: {namespaceSelector: {matchLabels: {tenant: c}}, podSelector: {matchLabels: {app: web}}}
    protocols:
    - tcp: {destinationPort: {number: 80}}
    - udp: {destinationPort: {range: {start: 1000, end: 2000}}}
    - sctp: {destinationPort: {number: 9}}
    - destinationNamedPort: http
  - action: Accept
    from: [{pods: {podSelector: {matchExpressions: [{key: app, operator: In, values: [db]}]}}}]
  egress:
  - name: to-nodes-and-out
    action: Pass
    to:
    - nodes: {matchLabels: {kubernetes.io/hostname: h1}}
    - networks: [10.0.0.0/8, 192.168.1.7/32, '::/0']
    protocols:
    - tcp: {destinationPort: {range: {start: 1, end: 65535}}}
`, Policy{Kind: KindClusterNP, Name: "c", Tier: TierAdmin, Priority: 10, Specs: []Spec{{
		SubjectNamespaces: &Selector{MatchLabels: map[string]string{"tenant": "a"}},
		Ingress: Direction{Ordered: []Rule{
			{Path: "spec.ingress[0]", Name: "deny-b", Action: ActionDeny, Peers: []Peer{
				{Endpoints: &EndpointSel{Namespaces: &Selector{MatchLabels: map[string]string{"tenant": "b"}}}},
				{Endpoints: &EndpointSel{Pods: Selector{MatchLabels: map[string]string{"app": "web"}}, Namespaces: &Selector{MatchLabels: map[string]string{"tenant": "c"}}}},
			}, Ports: []Port{{Protocol: TCP, Port: 80}, {Protocol: UDP, Port: 1000, EndPort: 2000}, {Protocol: SCTP, Port: 9}, {Protocol: ANY, Name: "http"}}},
			{Path: "spec.ingress[1]", Action: ActionAccept, Peers: []Peer{
				{Endpoints: &EndpointSel{Pods: Selector{Exprs: []Expr{{Key: "app", Operator: OpIn, Values: []string{"db"}}}}, Namespaces: &Selector{}}},
			}},
		}},
		Egress: Direction{Ordered: []Rule{
			{Path: "spec.egress[0]", Name: "to-nodes-and-out", Action: ActionPass, Peers: []Peer{
				{Nodes: &Selector{MatchLabels: map[string]string{"kubernetes.io/hostname": "h1"}}},
				{CIDR: mustPrefix("10.0.0.0/8")}, {CIDR: mustPrefix("192.168.1.7/32")}, {CIDR: mustPrefix("::/0")},
			}, Ports: []Port{{Protocol: TCP, Port: 1, EndPort: 65535}}},
		}},
	}}}},
	{"ClusterNetworkPolicy, Baseline tier, subject pods, Pass", cnpTierHead + `spec:
  tier: Baseline
  priority: 0
  subject: {pods: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: x}}, podSelector: {}}}
  egress: [{action: Pass, to: [{namespaces: {}}]}]
`, Policy{Kind: KindClusterNP, Name: "c", Tier: TierBaseline, Specs: []Spec{{
		SubjectNamespaces: &Selector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "x"}},
		Egress: Direction{Ordered: []Rule{{Path: "spec.egress[0]", Action: ActionPass,
			Peers: []Peer{{Endpoints: &EndpointSel{Namespaces: &Selector{}}}}}}},
	}}}},
	{"ClusterNetworkPolicy without rules", cnpTierHead + "spec: {tier: Admin, priority: 1000, subject: {namespaces: {}}}\n",
		Policy{Kind: KindClusterNP, Name: "c", Tier: TierAdmin, Priority: 1000, Specs: []Spec{{SubjectNamespaces: &Selector{}}}}},
	{"AdminNetworkPolicy, every kind of port", strings.Replace(anpHead, "{name: a}", "{name: a, labels: {team: net}}", 1) + `spec:
  priority: 0
  subject: {pods: {namespaceSelector: {}, podSelector: {matchLabels: {app: db}}}}
  ingress:
  - name: allow
    action: Allow
    from: [{namespaces: {}}]
    ports:
    - portNumber: {port: 5432}
    - portNumber: {protocol: UDP, port: 53}
    - namedPort: db
    - portRange: {start: 8000, end: 8080}
    - portRange: {protocol: SCTP, start: 1, end: 2}
  egress:
  - {action: Deny, to: [{networks: [0.0.0.0/0]}]}
  - {action: Pass, to: [{pods: {namespaceSelector: {matchLabels: {a: b}}, podSelector: {}}}], ports: [{namedPort: dns}]}
`, Policy{Kind: KindAdminNP, Name: "a", Tier: TierAdmin, Specs: []Spec{{
		Subject: Selector{MatchLabels: map[string]string{"app": "db"}}, SubjectNamespaces: &Selector{},
		Ingress: Direction{Ordered: []Rule{{Path: "spec.ingress[0]", Name: "allow", Action: ActionAllow,
			Peers: []Peer{{Endpoints: &EndpointSel{Namespaces: &Selector{}}}},
			Ports: []Port{{Protocol: TCP, Port: 5432}, {Protocol: UDP, Port: 53}, {Protocol: ANY, Name: "db"},
				{Protocol: TCP, Port: 8000, EndPort: 8080}, {Protocol: SCTP, Port: 1, EndPort: 2}}}}},
		Egress: Direction{Ordered: []Rule{
			{Path: "spec.egress[0]", Action: ActionDeny, Peers: []Peer{{CIDR: mustPrefix("0.0.0.0/0")}}},
			{Path: "spec.egress[1]", Action: ActionPass, Peers: []Peer{{Endpoints: &EndpointSel{Namespaces: &Selector{MatchLabels: map[string]string{"a": "b"}}}}},
				Ports: []Port{{Protocol: ANY, Name: "dns"}}},
		}},
	}}}},
	{"BaselineAdminNetworkPolicy", banpHead + `spec:
  subject: {namespaces: {matchExpressions: [{key: tenant, operator: Exists}]}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
  egress: [{name: out, action: Allow, to: [{nodes: {}}]}]
`, Policy{Kind: KindBaselineNP, Name: "default", Tier: TierBaseline, Specs: []Spec{{
		SubjectNamespaces: &Selector{Exprs: []Expr{{Key: "tenant", Operator: OpExists}}},
		Ingress:           Direction{Ordered: []Rule{{Path: "spec.ingress[0]", Action: ActionDeny, Peers: []Peer{{Endpoints: &EndpointSel{Namespaces: &Selector{}}}}}}},
		Egress:            Direction{Ordered: []Rule{{Path: "spec.egress[0]", Name: "out", Action: ActionAllow, Peers: []Peer{{Nodes: &Selector{}}}}}},
	}}}},
}

func TestParseTiersGood(t *testing.T) {
	for _, tc := range tierGood {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.yaml
			pols, err := Parse([]byte(src), "f.yaml")
			if err != nil {
				t.Fatal(err)
			}
			got := *pols[0]
			if !got.Cluster() || got.Namespace != "" || got.Key() != tc.want.Name {
				t.Errorf("cluster %v, namespace %q, key %q", got.Cluster(), got.Namespace, got.Key())
			}
			got.Raw, got.Source, got.File, got.DocIndex = "", "", "", 0
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
				for i := range got.Specs {
					t.Logf("spec %d: %+v", i, got.Specs[i])
				}
			}
			checkRoundTrip(t, []byte(src))
		})
	}
}

// rules returns n copies of a rule as a flow list.
func rules(n int, rule string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(rule+", ", n), ", ") + "]"
}

// tierBad are bad documents of the three kinds, one per error path, and
// the exact error each gets.
func tierBad() []struct{ name, yaml, want string } {
	const cnp = cnpTierHead + "spec: {tier: Admin, priority: 1, subject: {namespaces: {}}, "
	const anp = anpHead + "spec: {priority: 1, subject: {namespaces: {}}, "
	const banp = banpHead + "spec: {subject: {namespaces: {}}, "
	from := "from: [{namespaces: {}}]"
	var many []string
	for i := 0; i < 26; i++ {
		many = append(many, fmt.Sprintf("10.%d.0.0/16", i))
	}
	networks := strings.Join(many, ", ")
	cases := []struct{ name, yaml, want string }{
		// metadata and spec, every kind alike
		{"no name", "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\nmetadata: {}\n",
			"f.yaml: document 1: metadata.name: is required"},
		{"bad name", "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\nmetadata: {name: Bad_Name}\n",
			`f.yaml: document 1: metadata.name: "Bad_Name" must be at most 253 characters of lower case letters, digits, '-' and '.', starting and ending with a letter or digit`},
		{"namespace", strings.Replace(cnpTierHead, "{name: c}", "{name: c, namespace: x}", 1) + "spec: {tier: Admin, priority: 1, subject: {namespaces: {}}}\n",
			cnpDocPrefix + "metadata.namespace: a ClusterNetworkPolicy is cluster-scoped: it has no namespace (remove namespace: x)"},
		{"namespace default", strings.Replace(banpHead, "{name: default}", "{name: default, namespace: default}", 1) + "spec: {subject: {namespaces: {}}}\n",
			banpPrefix + "metadata.namespace: a BaselineAdminNetworkPolicy is cluster-scoped: it has no namespace (remove namespace: default)"},
		{"bad labels", strings.Replace(anpHead, "{name: a}", "{name: a, labels: {'a b': c}}", 1) + "spec: {priority: 1, subject: {namespaces: {}}}\n",
			anpDocPrefix + `metadata.labels: label key "a b": name must be 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`},
		{"no spec", cnpTierHead, cnpDocPrefix + "spec: is required"},
		{"specs", anpHead + "specs: [{}]\n", anpDocPrefix + "specs: a AdminNetworkPolicy has spec:, not specs:"},
		{"spec and specs", banpHead + "spec: {subject: {namespaces: {}}}\nspecs: [{}]\n", banpPrefix + "specs: a BaselineAdminNetworkPolicy has spec:, not specs:"},
		{"wrong apiVersion", strings.Replace(cnpTierHead, "v1alpha2", "v1alpha1", 1) + "spec: {}\n",
			`f.yaml: document 1: apiVersion: "policy.networking.k8s.io/v1alpha1" is not the apiVersion of ClusterNetworkPolicy (want policy.networking.k8s.io/v1alpha2)`},
		{"unknown spec field", cnp + "ingres: []}\n", cnpDocPrefix + `spec.ingres: unknown field "ingres" (known fields: egress, ingress, priority, subject, tier)`},

		// ClusterNetworkPolicy spec
		{"no tier", cnpTierHead + "spec: {priority: 1, subject: {namespaces: {}}}\n", cnpDocPrefix + "spec.tier: is required (Admin or Baseline)"},
		{"bad tier", cnpTierHead + "spec: {tier: admin, priority: 1, subject: {namespaces: {}}}\n", cnpDocPrefix + `spec.tier: "admin" is not a tier (Admin or Baseline)`},
		{"no priority", cnpTierHead + "spec: {tier: Admin, subject: {namespaces: {}}}\n", cnpDocPrefix + "spec.priority: is required (0-1000, lower first)"},
		{"priority too big", cnpTierHead + "spec: {tier: Admin, priority: 1001, subject: {namespaces: {}}}\n", cnpDocPrefix + "spec.priority: 1001 is not between 0 and 1000"},
		{"priority negative", anpHead + "spec: {priority: -1, subject: {namespaces: {}}}\n", anpDocPrefix + "spec.priority: -1 is not between 0 and 1000"},
		{"priority not a number", anpHead + "spec: {priority: high, subject: {namespaces: {}}}\n", anpDocPrefix + `spec.priority: expected an integer, got "high"`},
		{"no subject", cnpTierHead + "spec: {tier: Admin, priority: 1}\n", cnpDocPrefix + "spec.subject: is required (namespaces or pods)"},
		{"empty subject", anpHead + "spec: {priority: 1, subject: {}}\n", anpDocPrefix + "spec.subject: needs one of namespaces or pods"},
		{"subject with both", banpHead + "spec: {subject: {namespaces: {}, pods: {podSelector: {}}}}\n", banpPrefix + "spec.subject: has namespaces and pods: give exactly one"},
		{"subject pods without podSelector", cnpTierHead + "spec: {tier: Admin, priority: 1, subject: {pods: {namespaceSelector: {}}}}\n",
			cnpDocPrefix + "spec.subject.pods.podSelector: is required (use {} for every pod of the selected namespaces)"},
		{"subject bad selector", cnpTierHead + "spec: {tier: Admin, priority: 1, subject: {namespaces: {matchExpressions: [{key: a, operator: Equals}]}}}\n",
			cnpDocPrefix + `spec.subject.namespaces.matchExpressions[0].operator: unknown operator "Equals" (In, NotIn, Exists, DoesNotExist)`},
		{"subject bad namespaceSelector", anpHead + "spec: {priority: 1, subject: {pods: {podSelector: {}, namespaceSelector: {matchLabels: {a: 'b c'}}}}}\n",
			anpDocPrefix + `spec.subject.pods.namespaceSelector.matchLabels.a: label value "b c" must be at most 63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`},

		// rules
		{"too many rules", cnp + "ingress: " + rules(26, "{action: Deny, "+from+"}") + "}\n", cnpDocPrefix + "spec.ingress: has 26 rules: a ClusterNetworkPolicy has at most 25 per direction"},
		{"too many egress rules", anp + "egress: " + rules(101, "{action: Deny, to: [{namespaces: {}}]}") + "}\n", anpDocPrefix + "spec.egress: has 101 rules: a AdminNetworkPolicy has at most 100 per direction"},
		{"name too long", cnp + "ingress: [{name: " + strings.Repeat("n", 101) + ", action: Deny, " + from + "}]}\n", cnpDocPrefix + "spec.ingress[0].name: is 101 characters long, at most 100"},
		{"no action", cnp + "ingress: [{" + from + "}]}\n", cnpDocPrefix + "spec.ingress[0].action: is required (Accept, Deny or Pass)"},
		{"Allow in v1alpha2", cnp + "egress: [{action: Allow, to: [{namespaces: {}}]}]}\n", cnpDocPrefix + `spec.egress[0].action: "Allow" is not an action of a ClusterNetworkPolicy (Accept, Deny or Pass): ClusterNetworkPolicy spells it Accept`},
		{"Accept in v1alpha1", anp + "ingress: [{action: Accept, " + from + "}]}\n", anpDocPrefix + `spec.ingress[0].action: "Accept" is not an action of a AdminNetworkPolicy (Allow, Deny or Pass): AdminNetworkPolicy spells it Allow`},
		{"unknown action", anp + "ingress: [{action: Drop, " + from + "}]}\n", anpDocPrefix + `spec.ingress[0].action: "Drop" is not an action of a AdminNetworkPolicy (Allow, Deny or Pass)`},
		{"Pass in the baseline", banp + "ingress: [{action: Pass, " + from + "}]}\n", banpPrefix + `spec.ingress[0].action: "Pass" is not an action of a BaselineAdminNetworkPolicy (Allow or Deny): nothing is below the Baseline tier to pass to`},
		{"no from", cnp + "ingress: [{action: Deny}]}\n", cnpDocPrefix + "spec.ingress[0].from: is required: at least one peer (namespaces or pods)"},
		{"empty to", anp + "egress: [{action: Deny, to: []}]}\n", anpDocPrefix + "spec.egress[0].to: is required: at least one peer (namespaces, pods, nodes or networks)"},
		{"too many peers", cnp + "egress: [{action: Deny, to: " + rules(26, "{nodes: {}}") + "}]}\n", cnpDocPrefix + "spec.egress[0].to: has 26 peers: a ClusterNetworkPolicy rule has at most 25"},
		{"empty peer", cnp + "egress: [{action: Deny, to: [{}]}]}\n", cnpDocPrefix + "spec.egress[0].to[0]: needs one of namespaces, pods, nodes or networks"},
		{"empty ingress peer", anp + "ingress: [{action: Deny, from: [{namespaces: {}}, {}]}]}\n", anpDocPrefix + "spec.ingress[0].from[1]: needs one of namespaces or pods"},
		{"peer with two fields", anp + "egress: [{action: Deny, to: [{namespaces: {}, networks: [10.0.0.0/8]}]}]}\n", anpDocPrefix + "spec.egress[0].to[0]: has namespaces and networks: a peer has exactly one (use one peer for each)"},
		{"nodes at ingress", cnp + "ingress: [{action: Deny, from: [{nodes: {}}]}]}\n", cnpDocPrefix + `spec.ingress[0].from[0].nodes: unknown field "nodes" (known fields: namespaces, pods)`},
		{"domainNames", cnp + "egress: [{action: Accept, to: [{domainNames: [example.com]}]}]}\n",
			cnpDocPrefix + "spec.egress[0].to[0].domainNames: is not supported: a cnlab lab has no DNS, so there is no name resolution to learn the addresses of a domain from (use networks with its CIDRs)"},
		{"domainNames in v1alpha1", anp + "egress: [{action: Allow, to: [{domainNames: ['*.example.com']}]}]}\n",
			anpDocPrefix + "spec.egress[0].to[0].domainNames: is not supported: a cnlab lab has no DNS, so there is no name resolution to learn the addresses of a domain from (use networks with its CIDRs)"},
		{"peer pods without podSelector", cnp + "ingress: [{action: Deny, from: [{pods: {namespaceSelector: {}}}]}]}\n", cnpDocPrefix + "spec.ingress[0].from[0].pods.podSelector: is required (use {} for every pod of the selected namespaces)"},
		{"tcp without destinationPort", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{tcp: {}}]}]}\n",
			cnpDocPrefix + "spec.ingress[0].protocols[0].tcp: needs destinationPort (number or range), as the API requires: to match every port and protocol, leave protocols out"},
		{"v1alpha1 pods without namespaceSelector", banp + "ingress: [{action: Deny, from: [{pods: {podSelector: {}}}]}]}\n",
			banpPrefix + "spec.ingress[0].from[0].pods.namespaceSelector: is required in v1alpha1 (use {} for every namespace)"},
		{"peer bad pod selector", banp + "ingress: [{action: Deny, from: [{pods: {namespaceSelector: {}, podSelector: {matchLabels: {'a b': c}}}}]}]}\n",
			banpPrefix + `spec.ingress[0].from[0].pods.podSelector.matchLabels: label key "a b": name must be 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`},
		{"peer bad namespaces", cnp + "ingress: [{action: Deny, from: [{namespaces: {matchExpressions: [{key: a, operator: In}]}}]}]}\n", cnpDocPrefix + "spec.ingress[0].from[0].namespaces.matchExpressions[0].values: must not be empty for operator In"},
		{"peer bad nodes", cnp + "egress: [{action: Deny, to: [{nodes: {matchExpressions: [{key: a, operator: Exists, values: [b]}]}}]}]}\n", cnpDocPrefix + "spec.egress[0].to[0].nodes.matchExpressions[0].values: must be empty for operator Exists"},
		{"empty networks", cnp + "egress: [{action: Deny, to: [{networks: []}]}]}\n", cnpDocPrefix + "spec.egress[0].to[0].networks: must not be empty"},
		{"too many networks", anp + "egress: [{action: Deny, to: [{networks: [" + networks + "]}]}]}\n", anpDocPrefix + "spec.egress[0].to[0].networks: has 26 CIDRs, at most 25"},
		{"network without length", cnp + "egress: [{action: Deny, to: [{networks: [10.0.0.0/8, 10.1.2.3]}]}]}\n", cnpDocPrefix + `spec.egress[0].to[0].networks[1]: "10.1.2.3" needs a prefix length (e.g. 10.1.2.3/32)`},
		{"bad network", cnp + "egress: [{action: Deny, to: [{networks: [10.0.0.0/33]}]}]}\n", cnpDocPrefix + `spec.egress[0].to[0].networks[0]: "10.0.0.0/33" is not a CIDR (e.g. 10.0.0.0/8)`},
		{"empty network", cnp + "egress: [{action: Deny, to: [{networks: ['']}]}]}\n", cnpDocPrefix + "spec.egress[0].to[0].networks[0]: is required (e.g. 10.0.0.0/8)"},
		{"network twice", anp + "egress: [{action: Deny, to: [{networks: [10.0.0.0/8, 10.0.0.1/8]}]}]}\n", anpDocPrefix + "spec.egress[0].to[0].networks[1]: 10.0.0.0/8 is listed twice"},
		{"IPv6 network twice", anp + "egress: [{action: Deny, to: [{networks: ['fd00::/8', 'fd00::1/8']}]}]}\n", anpDocPrefix + "spec.egress[0].to[0].networks[1]: fd00::/8 is listed twice"},

		// v1alpha2 protocols
		{"empty protocols", cnp + "ingress: [{action: Deny, " + from + ", protocols: []}]}\n", cnpDocPrefix + "spec.ingress[0].protocols: must not be empty (leave it out to match every port and protocol)"},
		{"too many protocols", cnp + "ingress: [{action: Deny, " + from + ", protocols: " + rules(26, "{tcp: {}}") + "}]}\n", cnpDocPrefix + "spec.ingress[0].protocols: has 26 entries, at most 25"},
		{"empty protocol", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0]: needs one of tcp, udp, sctp or destinationNamedPort"},
		{"two protocols in one", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{tcp: {}, udp: {}}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0]: has tcp and udp: an entry has exactly one (use one entry for each)"},
		{"protocol and named port", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{sctp: {}, destinationNamedPort: web}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0]: has sctp and destinationNamedPort: an entry has exactly one (use one entry for each)"},
		{"empty destinationPort", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{udp: {destinationPort: {}}}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0].udp.destinationPort: needs number or range"},
		{"number and range", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{tcp: {destinationPort: {number: 80, range: {start: 1, end: 2}}}}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0].tcp.destinationPort: has number and range: give one"},
		{"port zero", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{tcp: {destinationPort: {number: 0}}}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0].tcp.destinationPort.number: 0 is not a port number (1-65535)"},
		{"port too big", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{sctp: {destinationPort: {number: 65536}}}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0].sctp.destinationPort.number: 65536 is not a port number (1-65535)"},
		{"range without start", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{tcp: {destinationPort: {range: {end: 2}}}}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0].tcp.destinationPort.range.start: is required"},
		{"range end too big", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{tcp: {destinationPort: {range: {start: 1, end: 70000}}}}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0].tcp.destinationPort.range.end: 70000 is not a port number (1-65535)"},
		{"empty range", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{tcp: {destinationPort: {range: {start: 80, end: 80}}}}]}]}\n", cnpDocPrefix + "spec.ingress[0].protocols[0].tcp.destinationPort.range: start 80 must be less than end 80"},
		{"bad named port", cnp + "ingress: [{action: Deny, " + from + ", protocols: [{destinationNamedPort: Web_Port}]}]}\n",
			cnpDocPrefix + `spec.ingress[0].protocols[0].destinationNamedPort: port name "Web_Port" must be lower case letters, digits and single '-', with at least one letter`},
		{"named port with nodes", cnp + "egress: [{action: Deny, to: [{namespaces: {}}, {nodes: {}}], protocols: [{tcp: {destinationPort: {number: 80}}}, {destinationNamedPort: web}]}]}\n",
			cnpDocPrefix + "spec.egress[0]: the named port of spec.egress[0].protocols[1] cannot be matched on the nodes or networks peer spec.egress[0].to[1]: only pods have named ports (give them separate rules)"},
		{"v1alpha1 ports in v1alpha2", cnp + "ingress: [{action: Deny, " + from + ", ports: [{portNumber: {port: 80}}]}]}\n",
			cnpDocPrefix + `spec.ingress[0].ports: unknown field "ports" (known fields: action, from, name, protocols)`},

		// v1alpha1 ports
		{"empty ports", anp + "ingress: [{action: Deny, " + from + ", ports: []}]}\n", anpDocPrefix + "spec.ingress[0].ports: must not be empty (leave it out to match every port and protocol)"},
		{"too many ports", anp + "ingress: [{action: Deny, " + from + ", ports: " + rules(101, "{namedPort: web}") + "}]}\n", anpDocPrefix + "spec.ingress[0].ports: has 101 entries, at most 100"},
		{"empty port", anp + "ingress: [{action: Deny, " + from + ", ports: [{}]}]}\n", anpDocPrefix + "spec.ingress[0].ports[0]: needs one of portNumber, namedPort or portRange"},
		{"two kinds of port", banp + "ingress: [{action: Deny, " + from + ", ports: [{namedPort: web, portRange: {start: 1, end: 2}}]}]}\n", banpPrefix + "spec.ingress[0].ports[0]: has namedPort and portRange: an entry has exactly one (use one entry for each)"},
		{"bad protocol", anp + "ingress: [{action: Deny, " + from + ", ports: [{portNumber: {protocol: ICMP, port: 1}}]}]}\n", anpDocPrefix + `spec.ingress[0].ports[0].portNumber.protocol: unknown protocol "ICMP" (TCP, UDP, SCTP)`},
		{"lower-case protocol", anp + "ingress: [{action: Deny, " + from + ", ports: [{portRange: {protocol: udp, start: 1, end: 2}}]}]}\n", anpDocPrefix + `spec.ingress[0].ports[0].portRange.protocol: unknown protocol "udp" (TCP, UDP, SCTP)`},
		{"no port number", anp + "ingress: [{action: Deny, " + from + ", ports: [{portNumber: {protocol: TCP}}]}]}\n", anpDocPrefix + "spec.ingress[0].ports[0].portNumber.port: is required"},
		{"port number too big", anp + "egress: [{action: Deny, to: [{namespaces: {}}], ports: [{portNumber: {port: 65536}}]}]}\n", anpDocPrefix + "spec.egress[0].ports[0].portNumber.port: 65536 is not a port number (1-65535)"},
		{"range backwards", anp + "ingress: [{action: Deny, " + from + ", ports: [{portRange: {start: 90, end: 80}}]}]}\n", anpDocPrefix + "spec.ingress[0].ports[0].portRange: start 90 must be less than end 80"},
		{"range without end", anp + "ingress: [{action: Deny, " + from + ", ports: [{portRange: {start: 90}}]}]}\n", anpDocPrefix + "spec.ingress[0].ports[0].portRange.end: is required"},
		{"bad namedPort", anp + "ingress: [{action: Deny, " + from + ", ports: [{namedPort: ''}]}]}\n", anpDocPrefix + `spec.ingress[0].ports[0].namedPort: port name "" must be 1-15 characters`},
		{"namedPort with networks", anp + "egress: [{action: Allow, to: [{networks: [10.0.0.0/8]}], ports: [{namedPort: web}]}]}\n",
			anpDocPrefix + "spec.egress[0]: the named port of spec.egress[0].ports[0] cannot be matched on the nodes or networks peer spec.egress[0].to[0]: only pods have named ports (give them separate rules)"},
		{"v1alpha2 protocols in v1alpha1", anp + "ingress: [{action: Deny, " + from + ", protocols: [{tcp: {}}]}]}\n",
			anpDocPrefix + `spec.ingress[0].protocols: unknown field "protocols" (known fields: action, from, name, ports)`},

		// BaselineAdminNetworkPolicy
		{"baseline not default", strings.Replace(banpHead, "{name: default}", "{name: tenants}", 1) + "spec: {subject: {namespaces: {}}}\n",
			`f.yaml: document 1 (BaselineAdminNetworkPolicy tenants): metadata.name: a BaselineAdminNetworkPolicy must be named "default" (a cluster has one), not "tenants"`},
		{"baseline priority", banpHead + "spec: {priority: 3, subject: {namespaces: {}}}\n",
			banpPrefix + "spec.priority: a BaselineAdminNetworkPolicy has no priority: there is one, evaluated after every Baseline-tier ClusterNetworkPolicy"},
		{"baseline tier field", banpHead + "spec: {tier: Baseline, subject: {namespaces: {}}}\n",
			banpPrefix + `spec.tier: unknown field "tier" (known fields: egress, ingress, priority, subject)`},
		{"twice", cnp + "}\n---\n" + cnp + "}\n", "f.yaml: document 2 (ClusterNetworkPolicy c): metadata.name: ClusterNetworkPolicy c is defined twice in this file (also document 1)"},
	}
	return cases
}

func TestParseTiersBad(t *testing.T) {
	for _, tc := range tierBad() {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "f.yaml")
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !input.Is(err) {
				t.Errorf("%T is not an input.Error", err)
			}
			if err.Error() != tc.want {
				t.Errorf("got  %s\nwant %s", err, tc.want)
			}
		})
	}
}

// The three kinds name themselves without a namespace ("Kind name"): a
// policy of one kind and a policy of another may share a name, and a name
// given twice under one kind in two files is refused.
func TestTierPoliciesMerge(t *testing.T) {
	a, err := Parse([]byte(strings.Replace(cnpTierHead, "{name: c}", "{name: a}", 1)+"spec: {tier: Admin, priority: 1, subject: {namespaces: {}}}\n---\n"+
		anpHead+"spec: {priority: 1, subject: {namespaces: {}}}\n"), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range a {
		if p.Key() != "a" || p.Ref() != p.Kind+" a" {
			t.Errorf("%s: key %q", p.Ref(), p.Key())
		}
	}
	b, err := Parse([]byte(anpHead+"spec: {priority: 2, subject: {namespaces: {}}}\n"), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Merge(a, b); err == nil || err.Error() != "b.yaml: AdminNetworkPolicy a is also defined in a.yaml: give it once" {
		t.Errorf("merge: %v", err)
	}
}

// Parsed cluster policies mean what they say in the model: an Admin
// Deny, an Admin Pass into a NetworkPolicy, and the Baseline for the
// rest, on the scenario lab (namespaces x, y, z, labelled ns: x and so on,
// and kubernetes.io/metadata.name).
func TestParsedTiersInTheModel(t *testing.T) {
	lab := scenarioLab(t)
	src := cnpTierHead + `spec:
  tier: Admin
  priority: 5
  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: x}}}
  ingress:
  - {name: no-y-80, action: Deny, from: [{namespaces: {matchLabels: {ns: y}}}], protocols: [{tcp: {destinationPort: {number: 80}}}]}
  - {action: Pass, from: [{namespaces: {matchLabels: {ns: y}}}]}
---
` + banpHead + `spec:
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {matchLabels: {ns: z}}}]}]
---
` + np("x", "only-81", "  podSelector: {}\n  ingress:\n  - ports: [{port: 81}]\n")
	m := modelFor(t, lab, src)
	if _, err := m.Compile(); err != nil {
		t.Fatal(err)
	}
	ep := func(id string) *topology.Endpoint {
		e, err := lab.Endpoint(id)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, c := range []struct {
		from, to string
		port     int
		allowed  bool
		rule     string
	}{
		{"y/a", "x/a", 80, false, "ClusterNetworkPolicy c spec.ingress[0]"},
		{"y/a", "x/a", 81, true, "NetworkPolicy x/only-81 spec.ingress[0]"},             // passed to the NetworkPolicy
		{"y/a", "x/a", 82, false, ""},                                                   // passed, and isolated by it
		{"z/a", "y/a", 80, false, "BaselineAdminNetworkPolicy default spec.ingress[0]"}, // y has no NetworkPolicy
		{"x/a", "y/b", 80, true, ""},                                                    // nothing decides
	} {
		v := m.Verdict(ep(c.from), ep(c.to), "TCP", c.port)
		if v.Allowed != c.allowed || (c.rule != "" && v.Ingress.Rule != c.rule) {
			t.Errorf("%s -> %s:%d: allowed %v by %q (%s), want %v by %q", c.from, c.to, c.port, v.Allowed, v.Ingress.Rule, v.Ingress.Reason, c.allowed, c.rule)
		}
	}
}

// A rule's name is limited in characters, not bytes, as the CRD counts.
func TestRuleNameCountsCharacters(t *testing.T) {
	doc := anpHead + "spec: {priority: 1, subject: {namespaces: {}}, ingress: [{name: " + strings.Repeat("é", 100) + ", action: Deny, from: [{namespaces: {}}]}]}\n"
	if _, err := Parse([]byte(doc), "f.yaml"); err != nil {
		t.Error(err)
	}
}
