package kpshape

// The Services TestFidelity (internal/kpshape/fidelity) puts on both
// sides, and whose listings testdata/ holds.

// FixtureServices are the Services both sides get, as one YAML file
// applied unchanged by kubectl and by cnlab: selectorless Services with
// fixed cluster IPs and node ports, and EndpointSlices written out, so
// that no pod is needed and both sides see the same addresses. Endpoints
// are addresses of the cluster's pod CIDR that no pod has: kube-proxy
// and cnlab program them all the same. Their nodeName is the node of a
// cluster named t-fid (and the lab's host of that name): the Local
// traffic policies see them as the node's, but for 10.244.1.x.
const FixtureServices = `apiVersion: v1
kind: Service
metadata: {name: one, namespace: default}
spec:
  clusterIP: 10.96.0.11
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: one-1, namespace: default, labels: {kubernetes.io/service-name: one}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.11], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: three, namespace: default}
spec:
  clusterIP: 10.96.0.12
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: three-1, namespace: default, labels: {kubernetes.io/service-name: three}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.21], nodeName: t-fid-node1}
- {addresses: [10.244.0.22], nodeName: t-fid-node1}
- {addresses: [10.244.0.23], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: twoports, namespace: default}
spec:
  clusterIP: 10.96.0.13
  ports: [{name: a, port: 80, targetPort: 8080}, {name: b, port: 81, targetPort: 8081}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: twoports-1, namespace: default, labels: {kubernetes.io/service-name: twoports}}
addressType: IPv4
ports: [{name: a, port: 8080, protocol: TCP}, {name: b, port: 8081, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.31], nodeName: t-fid-node1}
- {addresses: [10.244.0.32], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: none, namespace: default}
spec:
  clusterIP: 10.96.0.14
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec:
  clusterIP: 10.96.0.15
  ports: [{name: dns, port: 53, targetPort: 5353, protocol: UDP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dns-1, namespace: default, labels: {kubernetes.io/service-name: dns}}
addressType: IPv4
ports: [{name: dns, port: 5353, protocol: UDP}]
endpoints:
- {addresses: [10.244.0.51], nodeName: t-fid-node1}
- {addresses: [10.244.0.52], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: aff, namespace: default}
spec:
  clusterIP: 10.96.0.16
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 30}}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: aff-1, namespace: default, labels: {kubernetes.io/service-name: aff}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.61], nodeName: t-fid-node1}
- {addresses: [10.244.0.62], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: np, namespace: default}
spec:
  type: NodePort
  clusterIP: 10.96.0.17
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: np-1, namespace: default, labels: {kubernetes.io/service-name: np}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.71], nodeName: t-fid-node1}
- {addresses: [10.244.0.72], nodeName: t-fid-node1}
---
apiVersion: v1
kind: Service
metadata: {name: npl, namespace: default}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  clusterIP: 10.96.0.18
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: npl-1, namespace: default, labels: {kubernetes.io/service-name: npl}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.81], nodeName: t-fid-node1}
- {addresses: [10.244.1.82], nodeName: t-fid-node2}
---
apiVersion: v1
kind: Service
metadata: {name: itl, namespace: default}
spec:
  internalTrafficPolicy: Local
  clusterIP: 10.96.0.19
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: itl-1, namespace: default, labels: {kubernetes.io/service-name: itl}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [10.244.0.91], nodeName: t-fid-node1}
- {addresses: [10.244.1.92], nodeName: t-fid-node2}
`

// FixtureFrontends are FixtureServices' Service ports, as shapes name
// them: both sides must show every one.
var FixtureFrontends = []string{"10.96.0.11:80/tcp", "10.96.0.12:80/tcp", "10.96.0.13:80/tcp", "10.96.0.13:81/tcp", "10.96.0.14:80/tcp",
	"10.96.0.15:53/udp", "10.96.0.16:80/tcp", "10.96.0.17:80/tcp", "10.96.0.18:80/tcp", "10.96.0.19:80/tcp"}
