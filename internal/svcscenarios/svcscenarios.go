// Package svcscenarios holds the service scenario table shared by the
// labs' test (lab.TestServiceScenarios: cnlab's proxies) and the local
// cluster's (kube.TestServiceScenariosOnLocalCluster: the real
// kube-proxy): one lab of three backends and two clients over two hosts,
// and sets of Services (and policies) whose probe must match the model,
// each with a fact of the model checked by hand so that a scenario cannot
// pass by expecting nothing.
package svcscenarios

import (
	"fmt"
	"strings"

	"github.com/cnlab/cnlab/service"
)

// Lab is the lab of the service scenarios (fmt: its name, the link's
// kind): backends x/w1 and x/w2 on flip and x/w3 on flap (app: web;
// named port http is 8080 on w1 and w2, 8081 on w3; dns is UDP 5353),
// clients y/c1 on flip and y/c2 on flap.
const Lab = `name: %s
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: %s}
namespaces:
  x: {labels: {team: web}}
  y: {labels: {team: client}}
endpoints:
  - {name: w1, namespace: x, host: flip, labels: {app: web}, ports: [{name: http, port: 8080, protocol: TCP}, {name: dns, port: 5353, protocol: UDP}]}
  - {name: w2, namespace: x, host: flip, labels: {app: web}, ports: [{name: http, port: 8080, protocol: TCP}, {name: dns, port: 5353, protocol: UDP}]}
  - {name: w3, namespace: x, host: flap, labels: {app: web}, ports: [{name: http, port: 8081, protocol: TCP}, {name: dns, port: 5353, protocol: UDP}]}
  - {name: c1, namespace: y, host: flip, labels: {app: client}}
  - {name: c2, namespace: y, host: flap, labels: {app: client}}
`

// ServiceDoc is a Service of namespace x (spec: its indented spec).
func ServiceDoc(name, spec string) string {
	return "apiVersion: v1\nkind: Service\nmetadata: {name: " + name + ", namespace: x}\nspec:\n" + spec + "---\n"
}

// SliceDoc is an EndpointSlice of Service svc in namespace x, port http
// 8080 (endpoints: its indented list).
func SliceDoc(svc, endpoints string) string {
	return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: " + svc + "-1, namespace: x, labels: {kubernetes.io/service-name: " + svc + "}}\naddressType: IPv4\n" +
		"ports: [{name: http, port: 8080}]\nendpoints:\n" + endpoints + "---\n"
}

// Scenario is a set of Services (and policies) and the frontends whose
// probe must match the model; Want checks a fact of the model ("" when
// it holds).
type Scenario struct {
	Name, Services, Policies string
	Probe                    []string
	// Nodes: probe the frontends' node ports on these hosts too.
	Nodes []string
	Want  func(m *service.Model) string
}

// Expected is the model's set of backends for a client's new connections
// to a frontend's cluster IP.
func Expected(m *service.Model, from, ref string) []string {
	f, err := m.Resolved.Frontend(ref)
	if err != nil {
		return []string{err.Error()}
	}
	ep, _ := m.Lab.Endpoint(from)
	return m.Expect(ep, f).Expected
}

// WantExpected requires the model to send from's connections to ref's
// cluster IP to exactly ids.
func WantExpected(from, ref string, ids ...string) func(*service.Model) string {
	return func(m *service.Model) string {
		if got := Expected(m, from, ref); strings.Join(got, ",") != strings.Join(ids, ",") {
			return fmt.Sprintf("model: %s -> %s expects %v, want %v", from, ref, got, ids)
		}
		return ""
	}
}

// WantNodePort requires the model to send from's connections to ref's
// node port on host to exactly ids.
func WantNodePort(from, ref, host string, ids ...string) func(*service.Model) string {
	return func(m *service.Model) string {
		f, err := m.Resolved.Frontend(ref)
		if err != nil {
			return err.Error()
		}
		ep, _ := m.Lab.Endpoint(from)
		e, err := m.ExpectNodePort(ep, f, host)
		if err != nil {
			return err.Error()
		}
		if strings.Join(e.Expected, ",") != strings.Join(ids, ",") {
			return fmt.Sprintf("model: %s -> %s node port on %s expects %v, want %v", from, ref, host, e.Expected, ids)
		}
		return ""
	}
}

var svcDoc, sliceDoc = ServiceDoc, SliceDoc

// Scenarios is the table.
var Scenarios = []Scenario{
	{Name: "named target port per backend", Services: svcDoc("web", "  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n"),
		Probe: []string{"x/web"}, Want: WantExpected("y/c1", "x/web", "x/w1", "x/w2", "x/w3")},
	{Name: "numeric ports, two of them", Services: svcDoc("web", "  selector: {app: web}\n  ports: [{name: a, port: 80, targetPort: 8080}, {name: b, port: 81, targetPort: 8081}]\n"),
		Probe: []string{"x/web:a", "x/web:b"}, Want: WantExpected("y/c2", "x/web:b", "x/w1", "x/w2", "x/w3")},
	{Name: "udp", Services: svcDoc("dns", "  selector: {app: web}\n  ports: [{port: 53, targetPort: dns, protocol: UDP}]\n"),
		Probe: []string{"x/dns"}, Want: WantExpected("y/c1", "x/dns", "x/w1", "x/w2", "x/w3")},
	{Name: "no endpoints", Services: svcDoc("none", "  selector: {app: nothing}\n  ports: [{port: 80}]\n"),
		Probe: []string{"x/none"}, Want: WantExpected("y/c1", "x/none")},
	{Name: "manual slice with conditions", Services: svcDoc("man", "  ports: [{name: http, port: 80}]\n") +
		sliceDoc("man", "  - {addresses: [10.0.192.2], nodeName: flip}\n  - {addresses: [10.0.192.3], conditions: {ready: false}}\n  - {addresses: [10.0.191.2], conditions: {ready: true}}\n"),
		Probe: []string{"x/man"}, Want: WantExpected("y/c2", "x/man", "x/w1", "x/w3")},
	{Name: "terminating fallback", Services: svcDoc("man", "  ports: [{name: http, port: 80}]\n") +
		sliceDoc("man", "  - {addresses: [10.0.192.2], conditions: {ready: false, serving: false}}\n  - {addresses: [10.0.192.3], conditions: {ready: false, serving: true, terminating: true}}\n"),
		Probe: []string{"x/man"}, Want: WantExpected("y/c2", "x/man", "x/w2")},
	{Name: "affinity", Services: svcDoc("aff", "  selector: {app: web}\n  sessionAffinity: ClientIP\n  ports: [{port: 80, targetPort: http}]\n") +
		svcDoc("affu", "  selector: {app: web}\n  sessionAffinity: ClientIP\n  ports: [{port: 53, targetPort: dns, protocol: UDP}]\n"),
		Probe: []string{"x/aff", "x/affu"}, Want: WantExpected("y/c1", "x/aff", "x/w1", "x/w2", "x/w3")},
	{Name: "internalTrafficPolicy Local", Services: svcDoc("loc", "  selector: {app: web}\n  internalTrafficPolicy: Local\n  ports: [{port: 80, targetPort: http}]\n"),
		Probe: []string{"x/loc"}, Want: WantExpected("y/c2", "x/loc", "x/w3")},
	{Name: "policy judged on the target port", Services: svcDoc("web", "  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n"),
		Policies: "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {}\n  ingress: [{from: [{namespaceSelector: {matchLabels: {team: client}}}], ports: [{port: 8080}]}]\n",
		Probe:    []string{"x/web"}, Want: WantExpected("y/c1", "x/web", "x/w1", "x/w2")},
	{Name: "node port, externalTrafficPolicy Cluster", Services: svcDoc("np", "  type: NodePort\n  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n"),
		Probe: []string{"x/np"}, Nodes: []string{"flip", "flap"}, Want: WantNodePort("y/c1", "x/np", "flap", "x/w1", "x/w2", "x/w3")},
	{Name: "node port, externalTrafficPolicy Local", Services: svcDoc("npl", "  type: NodePort\n  externalTrafficPolicy: Local\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}, {name: dns, port: 53, targetPort: dns, protocol: UDP}]\n"),
		Probe: []string{"x/npl:http", "x/npl:dns"}, Nodes: []string{"flip", "flap"}, Want: WantNodePort("y/c1", "x/npl:dns", "flap", "x/w3")},
	{Name: "policy denying the port the Service listens on", Services: svcDoc("web", "  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n"),
		Policies: "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: x}\nspec:\n  podSelector: {}\n  ingress: [{ports: [{port: 80}]}]\n",
		Probe:    []string{"x/web"}, Want: WantExpected("y/c1", "x/web")},
}
