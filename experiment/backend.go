package experiment

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/topology"
)

// Backends: where a run's points are measured.
const (
	BackendLab        = results.BackendLab        // namespaces on this machine (the default)
	BackendKubernetes = results.BackendKubernetes // agent pods on a cluster (package kube)
)

// The kubernetes backend's matrix values.
const (
	PlacementSameNode  = results.PlacementSameNode
	PlacementCrossNode = results.PlacementCrossNode
	NetworkPod         = results.NetworkPod
	NetworkHost        = results.NetworkHost
)

// Backend measures points somewhere other than a lab on this machine:
// package kube's cluster. The runner calls Deploy when a point needs
// other endpoints than the last one's, ApplyPolicies when it needs other
// policies, runs the workloads through Command, and Teardown at the end
// (also after Ctrl-C, with a fresh context).
type Backend interface {
	// Name is recorded in results.json (BackendKubernetes).
	Name() string
	// Describe is environment.json's cluster block: the CNI, kube-proxy
	// mode and nodes as detected.
	Describe(ctx context.Context) (*ClusterInfo, error)
	// Deploy makes spec's endpoints run as p places them (p.Placement,
	// p.Network), replacing the previous deployment and its policies.
	Deploy(ctx context.Context, spec *topology.Spec, p Params, progress func(string)) (*Deployed, error)
	// ApplyPolicies makes text (policy YAML as a lab gets it, namespaces
	// of the topology) the deployment's policies.
	ApplyPolicies(ctx context.Context, text string) error
	// ApplyServices makes text (Service and EndpointSlice YAML, as a lab
	// gets it) the deployment's Services and returns the cluster IP of
	// measured (an endpoint-style ns/name; "" for none).
	ApplyServices(ctx context.Context, text, measured string) (netip.Addr, error)
	// Command is a local command that runs argv in an endpoint (by ID)
	// and relays its output and exit status; SIGTERM ends it there too.
	Command(ctx context.Context, endpoint string, argv []string) *exec.Cmd
	// Teardown deletes everything the run created.
	Teardown(ctx context.Context) error
}

// Deployed is where a backend runs a topology's endpoints.
type Deployed struct {
	Endpoints map[string]DeployedEndpoint // by endpoint ID (ns/name)
	// Namespaces maps the topology's namespaces to the cluster's.
	Namespaces map[string]string
	// Agent is the path of cnlab's own binary inside the endpoints.
	Agent string
}

// DeployedEndpoint is one endpoint's pod.
type DeployedEndpoint struct {
	IP   netip.Addr
	Node string
	Pod  string // namespace/name
}

// setBackend makes the experiment run on backend b: for
// BackendKubernetes, what cannot apply on a cluster is refused naming its
// key (datapath, chains, filler rules, fixed IPs, offloads, pinning,
// profiles, Services and L7 for now). validate then expands the points.
func (s *Spec) setBackend(b string) error {
	switch b {
	case "", BackendLab:
		s.Backend = ""
		return nil
	case BackendKubernetes:
	default:
		return &input.Error{File: "--backend", Msg: fmt.Sprintf("%q: %s or %s", b, BackendLab, BackendKubernetes)}
	}
	s.Backend = b
	const why = "cannot apply with --backend kubernetes: "
	if s.Pin != nil {
		return s.errf("pin", why+"the agent pods' CPUs are the kubelet's to choose")
	}
	if s.Profile {
		return s.errf("profile", why+"the kernel profile needs perf on the node")
	}
	check := func(path string, m Matrix, wlPath string, wl []Workload) error {
		for _, r := range kubeRefused {
			if r.set(m) {
				return s.errf(path+"."+r.key, "%s%s", why, r.why)
			}
		}
		for i, t := range m.Topology {
			if isChain(t) {
				return s.errf(fmt.Sprintf("%s.topology[%d]", path, i), why+"%s: chains are namespaces in series on one machine", t)
			}
			if !isPreset(t) {
				if err := s.checkKubeTopology(t, fmt.Sprintf("%s.topology[%d]", path, i)); err != nil {
					return err
				}
			}
		}
		for i, v := range m.PolicyMode {
			if v == ModeTopOfChain {
				return s.errf(fmt.Sprintf("%s.policyMode[%d]", path, i), why+"top-of-chain is iptables filler rules; no-match on a cluster is N NetworkPolicies")
			}
		}
		for i, w := range wl {
			if isHTTP(w.Kind) {
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
func (s *Spec) resolveKubeParams(p *Params, bad func(key, format string, args ...any) error) error {
	if s.Backend != BackendKubernetes {
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
	if p.Network == NetworkHost && (p.Policies > 0 || p.PolicyMode == ModeL4Rules) {
		return bad("policies", "%d with network host: NetworkPolicy does not apply to pods in the node's network (Kubernetes leaves it undefined; most CNIs ignore them): sweep policies in the pod network", p.Policies)
	}
	// Services: the cluster's kube-proxy (or its replacement) serves them.
	if p.ServiceBackends == 0 {
		p.ServiceBackends = 1
	}
	if p.ServicePosition == "" || p.Services == 1 {
		p.ServicePosition = PositionLast
	}
	return nil
}

// kubeSeries names a kubernetes point's line: the cluster, where it was
// placed and in which network.
func kubeSeries(p Params) string {
	parts := []string{"cluster"}
	if p.Placement != "" {
		parts = append(parts, p.Placement)
	}
	if p.Network == NetworkHost {
		parts = append(parts, "host-network")
	}
	if p.PolicyMode != ModeNoMatch && p.PolicyMode != "" {
		parts = append(parts, p.PolicyMode)
	}
	return strings.Join(parts, " ")
}

// ClusterInfo and NodeInfo are results.json's (package results).
type (
	ClusterInfo = results.ClusterInfo
	NodeInfo    = results.NodeInfo
)

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

// UsesPolicyMode reports whether a point generates policies in mode.
func (s *Spec) UsesPolicyMode(mode string) bool {
	points, err := s.Points()
	if err != nil {
		return false
	}
	for _, p := range points {
		if p.Params.PolicyMode == mode && (p.Params.Policies > 0 || mode == ModeL4Rules) {
			return true
		}
	}
	return false
}
