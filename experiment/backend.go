package experiment

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/topology"
)

// backend is where the runner measures a run's points: a lab on this
// machine (labBackend, lab.go) or a cluster (clusterBackend, cluster.go).
// Each owns what it has up and in force (the topology, the policies, the
// Services); the runner asks for a point's and records what each step
// did in the run's builds.
type backend interface {
	// name is results.json's backend (BackendLab, BackendKubernetes).
	name() string
	// describe is environment.json's cluster block (nil for a lab).
	describe(ctx context.Context) (*results.ClusterInfo, error)
	// up makes spec, p's topology, the one that runs, replacing the one
	// up (prev is its build's record, nil for none), and fills b, the new
	// build's record. An error that wraps errTeardown: the one up could
	// not be removed and nothing was built (b is not recorded).
	up(ctx context.Context, spec *topology.Spec, p results.Params, prev, b *results.Build) error
	// policies makes p's policies the ones in force, appending each apply
	// to b.PolicyApply (nothing when they already were); bi is b's index
	// in the run's builds.
	policies(ctx context.Context, p results.Params, b *results.Build, bi int) error
	// services does the same with p's Services (b.ServiceApply) and
	// returns where the workloads connect: the measured Service's cluster
	// IP, or the server's address.
	services(ctx context.Context, p results.Params, b *results.Build, bi int) (netip.Addr, error)
	// observe makes p's observe level the one the lab records at,
	// appending each change to b.ObserveApply (nothing when it already
	// was, or p gives none).
	observe(ctx context.Context, p results.Params, b *results.Build) error
	// sample is where pr's workloads run, connecting to dest (its
	// processes' host, endpoints, argvs), recording in pr where that is.
	sample(pr *results.PointResult, dest netip.Addr) (sampleEnv, error)
	// down takes what runs down (also after Ctrl-C), recording how long
	// that took in b (nil: no build was recorded).
	down(b *results.Build) error
}

// Cluster is what a run on a cluster needs of it: package kube's Backend,
// wired by cmd/cnlab (Options.Backend). The runner deploys one topology
// at a time, applies its policies and Services, runs the workloads
// through Exec and calls Teardown at the end (also after Ctrl-C, with a
// fresh context).
type Cluster interface {
	// Describe is environment.json's cluster block: the CNI, kube-proxy
	// mode and nodes as detected.
	Describe(ctx context.Context) (*results.ClusterInfo, error)
	// Deploy makes spec's endpoints run as placement (PlacementSameNode,
	// PlacementCrossNode; "" for the default) and hostNetwork say,
	// replacing the previous deployment and its policies.
	Deploy(ctx context.Context, spec *topology.Spec, placement string, hostNetwork bool, progress func(string)) error
	// Endpoint is where the deployment runs an endpoint (by ID, ns/name):
	// its address and node.
	Endpoint(id string) (ip netip.Addr, node string, ok bool)
	// Namespaces maps the topology's namespaces to the cluster's.
	Namespaces() map[string]string
	// Agent is the path of cnlab's own binary inside the endpoints.
	Agent() string
	// ApplyPolicies makes text (policy YAML as a lab gets it, namespaces
	// of the topology) the deployment's policies.
	ApplyPolicies(ctx context.Context, text string) error
	// ApplyServices makes text (Service and EndpointSlice YAML, as a lab
	// gets it) the deployment's Services and returns the cluster IP of
	// measured (an endpoint-style ns/name; "" for none).
	ApplyServices(ctx context.Context, text, measured string) (netip.Addr, error)
	// Exec runs argv in an endpoint and returns when it exits: nil for
	// status 0, an error with an ExitCode() int method for another. When
	// ctx ends the command is stopped there before Exec returns.
	Exec(ctx context.Context, endpoint string, argv []string, stdout, stderr io.Writer) error
	// Teardown deletes everything the run created.
	Teardown(ctx context.Context) error
}

// setBackend makes the experiment run on backend b: for
// BackendKubernetes, what cannot apply on a cluster is refused naming its
// key (datapath, chains, filler rules, fixed IPs, offloads, pinning,
// profiles, Services and L7 for now). validate then expands the points.
func (s *Spec) setBackend(b string) error {
	switch b {
	case "", results.BackendLab:
		s.Backend = ""
		return nil
	case results.BackendKubernetes:
	default:
		return &input.Error{File: "--backend", Msg: fmt.Sprintf("%q: %s or %s", b, results.BackendLab, results.BackendKubernetes)}
	}
	s.Backend = b
	const why = "cannot apply with --backend kubernetes: "
	// pin runs the workloads under taskset in the agent pods, as on a
	// lab: the CPUs are the node's, and a pod whose cpuset leaves one out
	// (the kubelet's static CPU manager) fails the point with taskset's
	// error.
	if s.Profile {
		return s.errf("profile", why+"the kernel profile needs perf on the node")
	}
	check := func(path string, m results.Matrix, wlPath string, wl []results.Workload) error {
		for _, r := range kubeRefused {
			if r.set(m) {
				return s.errf(path+"."+r.key, "%s%s", why, r.why)
			}
		}
		for i, t := range results.AxisOf("topology").Strings(m) {
			if results.IsChain(t) {
				return s.errf(fmt.Sprintf("%s.topology[%d]", path, i), why+"%s: chains are namespaces in series on one machine", t)
			}
			if !isPreset(t) {
				if err := s.checkKubeTopology(t, fmt.Sprintf("%s.topology[%d]", path, i)); err != nil {
					return err
				}
			}
		}
		for i, v := range results.AxisOf("policyMode").Strings(m) {
			if v == results.ModeTopOfChain {
				return s.errf(fmt.Sprintf("%s.policyMode[%d]", path, i), why+"top-of-chain is iptables filler rules; no-match on a cluster is N NetworkPolicies")
			}
		}
		for i, w := range wl {
			if results.IsHTTP(w.Kind) {
				return s.errf(fmt.Sprintf("%s[%d].kind", wlPath, i), why+"%s: not yet (the kubernetes backend runs tcp-stream, udp-stream, tcp-rr, tcp-crr, udp-rr and ping)", w.Kind)
			}
		}
		return nil
	}
	if err := check("matrix", s.Matrix, "workloads", s.Workloads); err != nil {
		return err
	}
	for i, sw := range s.Sweeps {
		if sw.Profile != nil && *sw.Profile {
			return s.errf(fmt.Sprintf("sweeps[%d].profile", i), why+"the kernel profile needs perf on the node")
		}
		if err := check(fmt.Sprintf("sweeps[%d].matrix", i), sw.Matrix, fmt.Sprintf("sweeps[%d].workloads", i), sw.Workloads); err != nil {
			return err
		}
	}
	return nil
}

// checkKubeTopology refuses a topology file whose endpoints have fixed
// addresses: a cluster's IPAM gives pods theirs.
func (s *Spec) checkKubeTopology(name, path string) error {
	spec, err := s.loadTopology(name, topology.Overrides{Name: "check"})
	if err != nil {
		return err
	}
	if spec.Chain != nil {
		return s.errf(path, "cannot apply with --backend kubernetes: %s is a chain", name)
	}
	raw, err := s.readTopologyText(name)
	if err != nil {
		return err
	}
	if fixedIP.MatchString(raw) {
		return s.errf(path, "cannot apply with --backend kubernetes: %s gives endpoints fixed addresses (ip:); a cluster's IPAM gives pods theirs", name)
	}
	return nil
}

// resolveKubeParams checks a point of a kubernetes run: the keys of a
// lab's datapath were refused by setBackend; a lab run refuses the
// cluster's keys.
func (s *Spec) resolveKubeParams(p *results.Params, bad func(key, format string, args ...any) error) error {
	if s.Backend != results.BackendKubernetes {
		switch {
		case p.Placement != "":
			return bad("placement", "applies with --backend kubernetes only (a lab places endpoints on its topology's hosts)")
		case p.Network != "":
			return bad("network", "applies with --backend kubernetes only")
		}
		return nil
	}
	if p.Policies > maxPortPolicies {
		return bad("policies", "%d: policies generated on ports %d and up take at most %d", p.Policies, fillerPort, maxPortPolicies)
	}
	if p.Network == results.NetworkHost && (p.Policies > 0 || p.PolicyMode == results.ModeL4Rules) {
		return bad("policies", "%d with network host: NetworkPolicy does not apply to pods in the node's network (Kubernetes leaves it undefined; most CNIs ignore them): sweep policies in the pod network", p.Policies)
	}
	if p.Network == results.NetworkHost && p.ClusterPolicies > 0 {
		return bad("clusterPolicies", "%d with network host: pods in the node's network are never a cluster policy's subjects (network-policy-api): sweep cluster policies in the pod network", p.ClusterPolicies)
	}
	// Services: the cluster's kube-proxy (or its replacement) serves them.
	if p.ServiceBackends == 0 {
		p.ServiceBackends = 1
	}
	if p.ServicePosition == "" || p.Services == 1 {
		p.ServicePosition = results.PositionLast
	}
	return nil
}

// kubeSeries names a kubernetes point's line: the cluster, where it was
// placed and in which network.
func kubeSeries(p results.Params) string {
	parts := []string{"cluster"}
	if p.Placement != "" {
		parts = append(parts, p.Placement)
	}
	if p.Network == results.NetworkHost {
		parts = append(parts, "host-network")
	}
	if p.PolicyMode != results.ModeNoMatch && p.PolicyMode != "" {
		parts = append(parts, p.PolicyMode)
	}
	return strings.Join(parts, " ")
}

// Topologies are the distinct topologies the points deploy, resolved as
// a run would (for checks before a run: hosts, namespaces).
func (s *Spec) Topologies() ([]*topology.Spec, error) {
	points, err := s.Points()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []*topology.Spec
	for _, p := range points {
		k := labKey(p.Params)
		if seen[k] {
			continue
		}
		seen[k] = true
		t, err := s.labSpec(p.Params, "check")
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// UsesClusterPolicies reports whether a point generates cluster policies
// (ClusterNetworkPolicy: clusterPolicyText).
func (s *Spec) UsesClusterPolicies() bool {
	points, err := s.Points()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(points, func(p results.Point) bool { return p.Params.ClusterPolicies > 0 })
}

// UsesPolicyMode reports whether a point generates policies in mode.
func (s *Spec) UsesPolicyMode(mode string) bool {
	points, err := s.Points()
	if err != nil {
		return false
	}
	for _, p := range points {
		if p.Params.PolicyMode == mode && (p.Params.Policies > 0 || mode == results.ModeL4Rules) {
			return true
		}
	}
	return false
}
