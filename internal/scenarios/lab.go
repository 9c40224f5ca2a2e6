// Package scenarios holds the policy scenario table shared by the policy
// model's unit tests and the datapaths' kernel tests: a lab of three
// Kubernetes namespaces with three endpoints each across two hosts, and
// policy files with a few hand-checked expectations each. The kernel tests
// compare every probed cell with the model; the model's tests check the
// hand-written expectations, so a wrong model cannot pass by agreeing with
// itself.
package scenarios

// Lab is the topology every scenario runs on: namespaces x, y, z with
// endpoints a, b, c each, spread over hosts flip and flap (a VXLAN-free
// wire; the multi-host tests also run it with a vxlan link).
const Lab = `name: scen
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wire}
namespaces:
  x: {labels: {ns: x, tier: front}}
  y: {labels: {ns: y, tier: back}}
  z: {labels: {ns: z}}
endpoints:
  - {name: a, namespace: x, host: flip, ip: 10.0.192.10, labels: {pod: a, app: web}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: b, namespace: x, host: flap, ip: 10.0.191.11, labels: {pod: b, app: db}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: c, namespace: x, host: flip, ip: 10.0.192.12, labels: {pod: c}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: a, namespace: y, host: flap, ip: 10.0.191.20, labels: {pod: a, app: web}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: b, namespace: y, host: flip, ip: 10.0.192.21, labels: {pod: b, app: db}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: c, namespace: y, host: flap, ip: 10.0.191.22, labels: {pod: c}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: a, namespace: z, host: flip, ip: 10.0.192.30, labels: {pod: a, app: web}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: b, namespace: z, host: flap, ip: 10.0.191.31, labels: {pod: b, app: db}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
  - {name: c, namespace: z, host: flip, ip: 10.0.192.32, labels: {pod: c}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}, {name: serve-81-udp, port: 81, protocol: UDP}]}
`

// Targets are the protocol/port pairs every scenario is probed on.
var Targets = []struct {
	Protocol string
	Port     int
}{{"TCP", 80}, {"TCP", 81}, {"UDP", 80}, {"UDP", 81}}

// Scenario is a set of policies and some cells checked by hand.
type Scenario struct {
	Name     string
	Policies string // multi-document YAML; empty: no policy
	Expect   []Cell
}

// Cell is one expected verdict: "x/a -> y/b tcp/80" allowed or not.
type Cell struct {
	From, To string
	Protocol string
	Port     int
	Allowed  bool
}

func allow(from, to, proto string, port int) Cell { return Cell{from, to, proto, port, true} }
func deny(from, to, proto string, port int) Cell  { return Cell{from, to, proto, port, false} }
