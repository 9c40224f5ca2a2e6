// The real Cilium (agent and CNI plugin), tried as the CNI of `cnlab cluster
// up` (issue 34; /work/reports/cilium.md). Its own module: its dependencies
// must not move the control plane's. Not yet built by scripts/k8s-tools.sh:
// build by hand with `GOFLAGS=-mod=mod go build -o DIR/ tool` (about 4 min on
// an idle 2-core machine, 15 min on a busy one). The gobgp pin of v1.20.2 is
// not served by the module proxy; v4.7.0 compiles in its place.
module github.com/cnlab/cnlab/tools/k8stest/cilium

go 1.26.0

require github.com/cilium/cilium v1.20.2

tool (
	github.com/cilium/cilium/daemon
	github.com/cilium/cilium/plugins/cilium-cni
)

replace sigs.k8s.io/controller-tools => github.com/cilium/controller-tools v0.21.0-1

replace github.com/osrg/gobgp/v4 => github.com/osrg/gobgp/v4 v4.7.0
