# cnlab — see README.md. Everything here runs as root.
GO ?= go
BIN := bin/cnlab

.PHONY: build install test demo bench generate clean

# -buildvcs=auto: record the commit (environment.json, results.json) even
# where GOFLAGS turns VCS stamping off.
build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/cnlab

install: build
	install -m 0755 $(BIN) /usr/local/bin/cnlab

# The test command of the README and of .ci/run. Packages run one at a
# time (-p 1): each test binary checks that it left the kernel as it found
# it, which only holds if no other package is changing it meanwhile.
# -timeout: package lab alone takes about 970 s on the 2-core VM (2026-11-28, with the
# cluster tier scenarios on every datapath; 755 s before), 1,470 s on
# 2026-11-29 (the dual-stack labs, with other work on the machine), past
# go test's default of 10 minutes per package; the whole suite about 45
# minutes, inside CI's 90.
# scripts/k8s-tools.sh builds the Kubernetes binaries the kubernetes
# backend's integration tests and `cnlab cluster up` run (control plane,
# kubelet, kube-proxy, kubectl, kwok, kube-router: about 20 minutes once;
# the real Cilium's agent and CNI plugin: 4 to 15 more; then cached: a
# no-op while tools/k8stest's go.mod and go.sum are unchanged).
test:
	$(GO) vet ./...
	./scripts/k8s-tools.sh >/dev/null
	$(GO) test -p 1 -count=1 -timeout 45m ./...

# The default demo: two hosts joined by a wire, iperf3 between them, in a
# lab named cnlab-demo (make demo LAB=name for another name; a LAB in the
# environment is ignored).
LAB = cnlab-demo
demo: build
	./scripts/demo.sh "$(LAB)"

# Rebuild the eBPF programs and their Go bindings (needs clang, llvm and
# libbpf-dev); the tests check the committed ones are up to date.
generate:
	$(GO) generate ./datapath/ebpf

bench:
	$(GO) test -run '^$$' -bench UpDown -benchtime 3x -count 5 ./topology

clean:
	rm -rf bin
