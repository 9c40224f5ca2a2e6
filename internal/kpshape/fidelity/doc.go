// Package fidelity holds TestFidelity: the real kube-proxy's rules on a
// local cluster and cnlab's proxies' rules on a lab, for the same
// Services, compared by package kpshape (docs/services.md, "Fidelity to
// the real kube-proxy"). It needs root and the cluster's binaries; its
// TestMain checks the machine is left as it was.
package fidelity
