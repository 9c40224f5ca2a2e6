#!/usr/bin/env bash
# Builds the Kubernetes binaries cnlab runs on this machine, from their Go
# modules with the ordinary toolchain: the control plane (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler), the node (kubelet,
# kube-proxy) and kubectl from tools/k8stest/kube, kwok (tools/k8stest/kwok)
# for the backend's control-plane tests, and kube-router's firewall
# (tools/k8stest/kuberouter) for `cnlab cluster up --policy kube-router`.
#
#   scripts/k8s-tools.sh           build if needed; print the binaries' directory
#                                  and point $CNLAB_K8S_TOOLS/current at it
#   scripts/k8s-tools.sh --check   print the directory if built, exit 1 if not
#   scripts/k8s-tools.sh --check-cilium   the same for the real Cilium's
#
# The binaries go to $CNLAB_K8S_TOOLS (default /var/cache/cnlab/k8s-tools)
# under a key made of the tool modules' go.mod and go.sum and the Go version,
# so a clean clone on the same machine finds them built. A cold build takes
# about 20 minutes on 2 cores and 3 GB of memory; Go's build cache makes a
# rebuild after a version change much quicker.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${CNLAB_K8S_TOOLS:-/var/cache/cnlab/k8s-tools}
key=$( (cat tools/k8stest/kube/go.mod tools/k8stest/kube/go.sum \
	tools/k8stest/kwok/go.mod tools/k8stest/kwok/go.sum \
	tools/k8stest/kuberouter/go.mod tools/k8stest/kuberouter/go.sum; go version) |
	sha256sum | cut -c1-16)
dir=$root/$key
bins="etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kwok kube-router"
built() {
	local b
	for b in $bins; do [[ -x $dir/$b ]] || return 1; done
}
# The real Cilium (tools/k8stest/cilium) has a key and a directory of its
# own: see below.
ckey=$( (cat tools/k8stest/cilium/go.mod tools/k8stest/cilium/go.sum; go version) | sha256sum | cut -c1-16)
cdir=$root/cilium-$ckey
cbuilt() {
	[[ -x $cdir/bin/cilium-agent && -x $cdir/bin/cilium-cni && -d $cdir/lib/bpf && -d $cdir/crds/v2 ]]
}
if [[ ${1:-} == --check-cilium ]]; then
	cbuilt || { echo "k8s-tools: the real Cilium is not built for key $ckey (run scripts/k8s-tools.sh)" >&2; exit 1; }
	echo "$cdir"
	exit 0
fi
if [[ ${1:-} == --check ]]; then
	built || { echo "k8s-tools: not built for key $key (run scripts/k8s-tools.sh)" >&2; exit 1; }
	echo "$dir"
	exit 0
fi
if ! built; then
	tmp=$dir.tmp.$$
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp"
	echo "k8s-tools: building the control plane into $dir (cold: about 20 minutes)" >&2
	start=$SECONDS
	# Built from modules, the binaries would say v0.0.0-master: stamp the
	# module's version so nodes and /version report it.
	kv=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' tools/k8stest/kube/go.mod)
	minor=$(echo "$kv" | cut -d. -f2)
	vp=k8s.io/component-base/version
	(cd tools/k8stest/kube && go build -trimpath -o "$tmp/" \
		-ldflags "-X $vp.gitVersion=$kv -X $vp.gitMajor=1 -X $vp.gitMinor=$minor" tool)
	mv "$tmp/v3" "$tmp/etcd" 2>/dev/null || mv "$tmp/server" "$tmp/etcd" 2>/dev/null || true
	(cd tools/k8stest/kwok && go build -trimpath -o "$tmp/" tool)
	(cd tools/k8stest/kuberouter && go build -trimpath -o "$tmp/" tool)
	for b in $bins; do
		[[ -x $tmp/$b ]] || { echo "k8s-tools: $b missing after the build" >&2; ls "$tmp" >&2; exit 1; }
	done
	rm -rf "$dir" && mv "$tmp" "$dir"
	echo "k8s-tools: built in $((SECONDS - start)) s" >&2
fi
# `cnlab cluster up` takes its binaries from $root/current by default.
ln -sfn "$key" "$root/current"

# The real Cilium (agent and CNI plugin, tools/k8stest/cilium) for
# `cnlab cluster up --cni cilium`, under a key of its own so that its
# build never moves the control plane's: the binaries, the bpf/ sources
# the agent compiles its datapath from at run time (with clang-19), and
# the CRDs its operator would register (cnlab runs no operator). Cold: 4
# minutes on an idle 2-core machine, 15 on a busy one.
if ! cbuilt; then
	ctmp=$cdir.tmp.$$
	trap 'rm -rf "$ctmp" "${tmp:-}"' EXIT
	mkdir -p "$ctmp/bin" "$ctmp/lib" "$ctmp/crds"
	echo "k8s-tools: building the real Cilium into $cdir (cold: 4 to 15 minutes)" >&2
	start=$SECONDS
	(cd tools/k8stest/cilium && go build -o "$ctmp/bin/" tool)
	mv "$ctmp/bin/daemon" "$ctmp/bin/cilium-agent"
	src=$(cd tools/k8stest/cilium && go list -m -f '{{.Dir}}' github.com/cilium/cilium)
	cp -r "$src/bpf" "$ctmp/lib/bpf"
	cp -r "$src/pkg/k8s/apis/cilium.io/client/crds/v2" "$src/pkg/k8s/apis/cilium.io/client/crds/v2alpha1" "$ctmp/crds/"
	chmod -R u+w "$ctmp"
	rm -rf "$cdir" && mv "$ctmp" "$cdir"
	echo "k8s-tools: Cilium built in $((SECONDS - start)) s" >&2
fi
ln -sfn "cilium-$ckey" "$root/cilium-current"
echo "$dir"
