// Package kpshape reduces kube-proxy's rules, and cnlab's re-implementation
// of them, to their shape per Service port: which chains a new connection
// walks, how it picks an endpoint, what it marks and masquerades, what
// rejects a Service without endpoints. Names are left out (kube-proxy's
// chains are hashes of its own), so the real kube-proxy's rules and
// cnlab's compare (docs/services.md, "Fidelity to the real kube-proxy").
package kpshape
