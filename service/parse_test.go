package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/input"
)

const svcHead = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: x}\n"

// TestParseBad feeds one bad document per case and checks the one error:
// the file, the document, the YAML path and the reason.
func TestParseBad(t *testing.T) {
	spec := func(body string) string { return svcHead + "spec:\n" + body }
	slice := "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: x, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\n"
	cases := []struct{ name, yaml, want string }{
		{"empty", "", "bad.yaml: no Service or EndpointSlice documents"},
		{"not a mapping", "- a\n", "document 1: a document must be a mapping"},
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", "document 1: kind: is required (Service or EndpointSlice)"},
		{"other kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n", `kind: "Pod" is not supported (Service, EndpointSlice)`},
		{"NetworkPolicy to policy apply", "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec: {podSelector: {}}\n",
			`bad.yaml: document 1: kind: "NetworkPolicy" is not supported (Service, EndpointSlice): apply NetworkPolicy documents with cnlab policy apply`},
		{"CiliumNetworkPolicy to policy apply", svcHead + "spec: {ports: [{port: 80}]}\n---\napiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: c, namespace: x}\nspecs: [{endpointSelector: {}, ingress: [{}]}]\n",
			`bad.yaml: document 2: kind: "CiliumNetworkPolicy" is not supported (Service, EndpointSlice): apply CiliumNetworkPolicy documents with cnlab policy apply`},
		{"Endpoints", "apiVersion: v1\nkind: Endpoints\nmetadata: {name: a}\n", "kind: v1 Endpoints is not supported"},
		{"list", "apiVersion: v1\nkind: ServiceList\nitems: []\n", "kind: ServiceList is not supported: give its items as separate documents"},
		{"api version", "apiVersion: apps/v1\nkind: Service\nmetadata: {name: a}\n", `apiVersion: "apps/v1" is not the apiVersion of Service (want v1)`},
		{"no name", "apiVersion: v1\nkind: Service\nmetadata: {}\nspec: {ports: [{port: 80}]}\n", "metadata.name: is required"},
		{"name digit", "apiVersion: v1\nkind: Service\nmetadata: {name: 1web}\nspec: {ports: [{port: 80}]}\n", "metadata.name: \"1web\" must start with a letter"},
		{"bad namespace", "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: X_Y}\nspec: {ports: [{port: 80}]}\n", "metadata.namespace:"},
		{"unknown field", spec("  ports: [{port: 80, targetprot: 8080}]\n"), `spec.ports[0].targetprot: unknown field "targetprot"`},
		{"no spec", svcHead, "document 1 (Service x/web): spec: is required"},
		{"no ports", spec("  selector: {app: web}\n"), "spec.ports: at least one port is required"},
		{"external name", spec("  type: ExternalName\n  externalName: example.com\n"), "spec.type: ExternalName is not supported"},
		{"load balancer", spec("  type: LoadBalancer\n  ports: [{port: 80}]\n"), "spec.type: LoadBalancer is not supported"},
		{"bad type", spec("  type: Headless\n  ports: [{port: 80}]\n"), `spec.type: "Headless" is not a Service type`},
		{"external IPs", spec("  externalIPs: [1.2.3.4]\n  ports: [{port: 80}]\n"), "spec.externalIPs: external IPs are not supported"},
		{"lb ip", spec("  loadBalancerIP: 1.2.3.4\n  ports: [{port: 80}]\n"), "spec.loadBalancerIP: LoadBalancer Services are not supported"},
		{"traffic distribution", spec("  trafficDistribution: PreferClose\n  ports: [{port: 80}]\n"), "spec.trafficDistribution: topology-aware routing is not supported"},
		{"bad family", spec("  ipFamilies: [IPv5]\n  ports: [{port: 80}]\n"), `spec.ipFamilies[0]: "IPv5" is not an IP family (IPv4, IPv6)`},
		{"family twice", spec("  ipFamilies: [IPv6, IPv6]\n  ipFamilyPolicy: PreferDualStack\n  ports: [{port: 80}]\n"), `spec.ipFamilies[1]: IPv6 is also spec.ipFamilies[0]`},
		{"two families single stack", spec("  ipFamilies: [IPv4, IPv6]\n  ports: [{port: 80}]\n"), "spec.ipFamilies: gives two families, but ipFamilyPolicy is SingleStack"},
		{"bad family policy", spec("  ipFamilyPolicy: DualStack\n  ports: [{port: 80}]\n"), `spec.ipFamilyPolicy: "DualStack" is not an IP family policy (SingleStack, PreferDualStack, RequireDualStack)`},
		{"bad cluster ip", spec("  clusterIP: 10.96.0.300\n  ports: [{port: 80}]\n"), `spec.clusterIP: "10.96.0.300" is not an IPv4 or IPv6 address`},
		{"cluster ip of another family", spec("  clusterIP: 'fd00::1'\n  ipFamilies: [IPv4]\n  ports: [{port: 80}]\n"), `spec.clusterIP: fd00::1 is an IPv6 address, but spec.ipFamilies[0] is IPv4 (they must be in the same order)`},
		{"three cluster ips", spec("  clusterIPs: [10.96.0.5, 'fd00:96::5', 10.96.0.6]\n  ports: [{port: 80}]\n"), "spec.clusterIPs: gives 3 addresses: at most two, one per family"},
		{"two cluster ips single stack", spec("  clusterIPs: [10.96.0.5, 'fd00:96::5']\n  ports: [{port: 80}]\n"), "spec.clusterIPs: gives two addresses, but ipFamilyPolicy is SingleStack"},
		{"headless and another", spec("  clusterIPs: [None, 'fd00:96::5']\n  ipFamilyPolicy: PreferDualStack\n  ports: [{port: 80}]\n"), "spec.clusterIPs[0]: a headless Service (None) has no other cluster IP"},
		{"two cluster ips", spec("  clusterIPs: [10.96.0.5, 10.96.0.6]\n  ports: [{port: 80}]\n"), "spec.clusterIPs[1]: 10.96.0.6 is a second IPv4 address (spec.clusterIPs[0] is one): one address per family"},
		{"cluster ips differ", spec("  clusterIP: 10.96.0.5\n  clusterIPs: [10.96.0.6]\n  ports: [{port: 80}]\n"), "spec.clusterIPs[0]: \"10.96.0.6\" differs from spec.clusterIP"},
		{"headless nodeport", spec("  type: NodePort\n  clusterIP: None\n  ports: [{port: 80}]\n"), "spec.clusterIP: a NodePort Service cannot be headless"},
		{"unnamed ports", spec("  ports: [{port: 80}, {port: 81}]\n"), "spec.ports[0].name: is required when a Service has more than one port"},
		{"duplicate port names", spec("  ports: [{name: a, port: 80}, {name: a, port: 81}]\n"), `spec.ports[1].name: "a" is also the name of spec.ports[0]`},
		{"duplicate ports", spec("  ports: [{name: a, port: 80}, {name: b, port: 80}]\n"), "spec.ports[1].port: TCP/80 is also spec.ports[0]"},
		{"bad port name", spec("  ports: [{name: A_B, port: 80}]\n"), "spec.ports[0].name:"},
		{"port range", spec("  ports: [{port: 70000}]\n"), "spec.ports[0].port: 70000 is not a port number"},
		{"port zero", spec("  ports: [{port: 0}]\n"), "spec.ports[0].port: 0 is not a port number"},
		{"port string", spec("  ports: [{port: http}]\n"), `spec.ports[0].port: expected an integer, got "http"`},
		{"sctp", spec("  ports: [{port: 80, protocol: SCTP}]\n"), "spec.ports[0].protocol: SCTP Services are not supported"},
		{"bad protocol", spec("  ports: [{port: 80, protocol: tcp}]\n"), `spec.ports[0].protocol: "tcp" is not a protocol (TCP, UDP)`},
		{"target port range", spec("  ports: [{port: 80, targetPort: 0}]\n"), "spec.ports[0].targetPort: 0 is not a port number"},
		{"target port name", spec("  ports: [{port: 80, targetPort: Not_A_Name}]\n"), "spec.ports[0].targetPort: port name"},
		{"node port on cluster ip", spec("  ports: [{port: 80, nodePort: 30080}]\n"), "spec.ports[0].nodePort: is only allowed in a NodePort Service"},
		{"node port range", spec("  type: NodePort\n  ports: [{port: 80, nodePort: 8080}]\n"), "spec.ports[0].nodePort: 8080 is outside the node port range 30000-32767"},
		{"affinity", spec("  sessionAffinity: Cookie\n  ports: [{port: 80}]\n"), `spec.sessionAffinity: "Cookie" is not a session affinity`},
		{"affinity timeout", spec("  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}\n  ports: [{port: 80}]\n"), "spec.sessionAffinityConfig.clientIP.timeoutSeconds: 0 is out of range (1 to 86400)"},
		{"affinity config alone", spec("  sessionAffinityConfig: {clientIP: {timeoutSeconds: 5}}\n  ports: [{port: 80}]\n"), "spec.sessionAffinityConfig: is only allowed with sessionAffinity: ClientIP"},
		{"internal policy", spec("  internalTrafficPolicy: Node\n  ports: [{port: 80}]\n"), `spec.internalTrafficPolicy: "Node" is not a traffic policy`},
		{"external policy on cluster ip", spec("  externalTrafficPolicy: Local\n  ports: [{port: 80}]\n"), "spec.externalTrafficPolicy: applies to NodePort Services only"},
		{"slice fields in service", svcHead + "endpoints: [{addresses: [10.0.0.1]}]\nspec: {ports: [{port: 80}]}\n", "endpoints: is a field of EndpointSlice, not of Service"},
		{"duplicate", svcHead + "spec: {ports: [{port: 80}]}\n---\n" + svcHead + "spec: {ports: [{port: 80}]}\n", "metadata.name: Service x/web is defined twice in this file (also document 1)"},
		{"slice no label", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4\n", "metadata.labels: kubernetes.io/service-name is required"},
		{"slice address type", strings.Replace(slice, "IPv4", "FQDN", 1), "addressType: FQDN is not supported"},
		{"slice address of another family", strings.Replace(slice, "IPv4", "IPv6", 1) + "endpoints: [{addresses: [10.0.192.5]}]\n", `endpoints[0].addresses[0]: "10.0.192.5" is not an IPv6 address (addressType IPv6)`},
		{"slice no address type", strings.Replace(slice, "addressType: IPv4\n", "", 1), "addressType: is required (IPv4, IPv6)"},
		{"slice spec", slice + "spec: {}\n", "spec: an EndpointSlice has no spec"},
		{"slice two addresses", slice + "endpoints: [{addresses: [10.0.0.1, 10.0.0.2]}]\n", "endpoints[0].addresses: must hold exactly one address (it holds 2)"},
		{"slice bad address", slice + "endpoints: [{addresses: [10.0.0.256]}]\n", `endpoints[0].addresses[0]: "10.0.0.256" is not an IPv4 address`},
		{"slice hints", slice + "endpoints: [{addresses: [10.0.0.1], hints: {forZones: [{name: a}]}}]\n", "endpoints[0].hints: topology hints are not supported"},
		{"slice port all", slice + "ports: [{name: http}]\n", "ports[0].port: is required"},
		{"slice port range", slice + "ports: [{name: http, port: 0}]\n", "ports[0].port: 0 is not a port number"},
		{"slice port protocol", slice + "ports: [{name: http, port: 80, protocol: SCTP}]\n", `ports[0].protocol: "SCTP" is not supported`},
		{"slice unknown field", slice + "endpoints: [{addresses: [10.0.0.1], conditions: {live: true}}]\n", `endpoints[0].conditions.live: unknown field "live"`},
		{"alias", "apiVersion: v1\nkind: Service\nmetadata: {name: &n web}\nspec: {selector: {app: *n}, ports: [{port: 80}]}\n", "aliases (*n) are not supported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.yaml), "bad.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			if !input.Is(err) {
				t.Errorf("not an input error: %T %v", err, err)
			}
			if !strings.HasPrefix(err.Error(), "bad.yaml: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans several lines: %q", err)
			}
		})
	}
}

// TestParseGood checks what the accepted examples become, and that the
// stored text reads back as the same documents.
func TestParseGood(t *testing.T) {
	for _, path := range goodFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			svcs, sls, err := ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			svcs2, sls2, err := Parse(Encode(svcs, sls), "stored")
			if err != nil {
				t.Fatalf("stored text does not parse: %v", err)
			}
			if len(svcs2) != len(svcs) || len(sls2) != len(sls) {
				t.Fatalf("stored text reads back as %d Services and %d slices, want %d and %d", len(svcs2), len(sls2), len(svcs), len(sls))
			}
			for i := range svcs {
				a, b := *svcs[i], *svcs2[i]
				a.Doc, b.Doc = Doc{}, Doc{}
				if !equalJSON(t, a, b) {
					t.Errorf("%s reads back differently", svcs[i].Ref())
				}
			}
		})
	}
	svcs, sls, err := ParseFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	web := svcs[0]
	if web.Key() != "x/web" || web.Type != TypeClusterIP || web.Affinity != 0 || len(web.Ports) != 2 ||
		web.Ports[0].TargetName != "serve-80-tcp" || web.Ports[0].Protocol != "TCP" || web.Ports[1].TargetPort != 81 {
		t.Errorf("x/web parsed as %+v", web)
	}
	np := svcs[1]
	if np.Type != TypeNodePort || !np.ExternalLocal || np.Affinity != DefaultAffinity || np.Ports[0].NodePort != 30080 {
		t.Errorf("y/np parsed as %+v", np)
	}
	if len(sls) != 1 || sls[0].Service != "manual" || len(sls[0].Endpoints) != 3 {
		t.Fatalf("slices parsed as %+v", sls)
	}
	e := sls[0].Endpoints
	if !e[0].Ready || !e[0].Serving || e[0].Terminating || e[1].Ready || !e[1].Serving || !e[1].Terminating || e[2].Ready || e[2].Serving {
		t.Errorf("conditions defaulted wrongly: %+v", e)
	}
}

func goodFiles(t testing.TB) []string {
	t.Helper()
	files, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("../examples/services/*.yaml")
	for _, f := range more {
		if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), "kind: Service") {
			files = append(files, f)
		}
	}
	if len(files) < 2 {
		t.Fatalf("no example files found: %v", files)
	}
	return files
}

// FuzzParse feeds the parser mutations of the example Services: it must
// never panic, refuse only with an input.Error, and what it accepts must
// read back from its stored text as the same documents.
func FuzzParse(f *testing.F) {
	for _, path := range goodFiles(f) {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\nspec: {podSelector: {}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		svcs, sls, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if !input.Is(err) {
				t.Fatalf("error %T is not an input.Error: %v", err, err)
			}
			return
		}
		svcs2, sls2, err := Parse(Encode(svcs, sls), "stored")
		if err != nil || len(svcs2) != len(svcs) || len(sls2) != len(sls) {
			t.Fatalf("stored text reads back as %d Services and %d slices (want %d and %d): %v", len(svcs2), len(sls2), len(svcs), len(sls), err)
		}
	})
}
