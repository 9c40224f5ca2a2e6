#!/usr/bin/env bash
# Builds the Kubernetes control plane the kubernetes backend's integration
# tests run against: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler (tools/k8stest/kube) and kwok (tools/k8stest/kwok), from
# their Go modules with the ordinary toolchain.
#
#   scripts/k8s-tools.sh           build if needed; print the binaries' directory
#   scripts/k8s-tools.sh --check   print the directory if built, exit 1 if not
#
# The binaries go to $CNLAB_K8S_TOOLS (default /var/cache/cnlab/k8s-tools)
# under a key made of the tool modules' go.mod and go.sum and the Go version,
# so a clean clone on the same machine finds them built. A cold build takes
# about 7 minutes on 2 cores and 3 GB of memory; Go's build cache makes a
# rebuild after a version change much quicker.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${CNLAB_K8S_TOOLS:-/var/cache/cnlab/k8s-tools}
key=$( (cat tools/k8stest/kube/go.mod tools/k8stest/kube/go.sum \
	tools/k8stest/kwok/go.mod tools/k8stest/kwok/go.sum; go version) |
	sha256sum | cut -c1-16)
dir=$root/$key
bins="etcd kube-apiserver kube-controller-manager kube-scheduler kwok"
built() {
	local b
	for b in $bins; do [[ -x $dir/$b ]] || return 1; done
}
if [[ ${1:-} == --check ]]; then
	built || { echo "k8s-tools: not built for key $key (run scripts/k8s-tools.sh)" >&2; exit 1; }
	echo "$dir"
	exit 0
fi
if ! built; then
	tmp=$dir.tmp.$$
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp"
	echo "k8s-tools: building the control plane into $dir (cold: about 7 minutes)" >&2
	start=$SECONDS
	(cd tools/k8stest/kube && go build -trimpath -o "$tmp/" tool)
	mv "$tmp/v3" "$tmp/etcd" 2>/dev/null || mv "$tmp/server" "$tmp/etcd" 2>/dev/null || true
	(cd tools/k8stest/kwok && go build -trimpath -o "$tmp/" tool)
	for b in $bins; do
		[[ -x $tmp/$b ]] || { echo "k8s-tools: $b missing after the build" >&2; ls "$tmp" >&2; exit 1; }
	done
	rm -rf "$dir" && mv "$tmp" "$dir"
	echo "k8s-tools: built in $((SECONDS - start)) s" >&2
fi
echo "$dir"
