package experiment

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/topology"
)

// parseOffloads reads "on", "off" or a list like "tso=off,gso=off,gro=on"
// into ethtool -K settings.
func parseOffloads(v string) (map[string]string, error) {
	all := []string{"tso", "gso", "gro"}
	out := map[string]string{}
	if v == "on" || v == "off" {
		for _, k := range all {
			out[k] = v
		}
		return out, nil
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || !slices.Contains(all, k) || (val != "on" && val != "off") {
			return nil, fmt.Errorf("%q: on, off, or a list such as tso=off,gso=off,gro=on (keys tso, gso, gro)", v)
		}
		out[k] = val
	}
	return out, nil
}

// Points expands the experiment into its points, in a fixed order (the
// runner shuffles them). validate expands them once; Points returns a
// copy of that expansion.
func (s *Spec) Points() ([]results.Point, error) {
	c := s.cache()
	c.pointsMu.Lock()
	defer c.pointsMu.Unlock()
	if !c.expanded {
		c.points, c.pointsErr = s.expand()
		c.expanded = true
	}
	return slices.Clone(c.points), c.pointsErr
}

// expand computes Points.
func (s *Spec) expand() ([]results.Point, error) {
	type part struct {
		name, path string
		m          results.Matrix
		wl         []results.Workload
		profile    bool
		reps       int
		prec       *results.Precision
	}
	var parts []part
	if len(s.Sweeps) == 0 {
		parts = append(parts, part{"", "matrix", s.Matrix, s.Workloads, s.Profile, s.Repetitions, s.Precision})
	}
	for i, sw := range s.Sweeps {
		m := s.Matrix
		m.Override(sw.Matrix)
		wl := sw.Workloads
		if len(wl) == 0 {
			wl = s.Workloads
		}
		prof := s.Profile
		if sw.Profile != nil {
			prof = *sw.Profile
		}
		reps := s.Repetitions
		if sw.Repetitions > 0 {
			reps = sw.Repetitions
		}
		prec := s.Precision
		if sw.Precision != nil {
			prec = sw.Precision
		}
		parts = append(parts, part{sw.Name, fmt.Sprintf("sweeps[%d].matrix", i), m, wl, prof, reps, prec})
	}
	var out []results.Point
	seen := map[string]bool{}
	for _, pt := range parts {
		ds := pt.m.Dims()
		idx := make([]int, len(ds))
		for {
			p := results.Params{ChainLength: chainLengthUnset, ClusterPolicies: clusterPoliciesUnset}
			for k, d := range ds {
				d.Set(&p, idx[k])
			}
			if err := s.resolveParams(&p, pt.path); err != nil {
				return nil, err
			}
			for _, w := range pt.wl {
				q := p
				w = effectiveWorkload(w, &q)
				if w.Kind == results.UDPStream && w.Length > 65507 {
					return nil, s.errf(pt.path+".size", "%d bytes: a UDP datagram holds at most 65507", w.Length)
				}
				if err := s.checkPortsFor(w, q, pt.path); err != nil {
					return nil, err
				}
				// flows, size and zerocopy that do not apply to a workload
				// (and backends and position without Services) would
				// measure the same point again: once is enough.
				k := q
				if k.Services == 0 {
					k.ServiceBackends, k.ServicePosition = 0, ""
				}
				key := fmt.Sprintf("%s %+v %+v", pt.name, k, w)
				if seen[key] {
					continue
				}
				seen[key] = true
				ser := series(q)
				if s.Backend == results.BackendKubernetes {
					ser = kubeSeries(q)
				}
				out = append(out, results.Point{ID: fmt.Sprintf("p%04d", len(out)+1), Sweep: pt.name, Params: q, Workload: w,
					Series: ser, Profile: pt.profile, Repetitions: pt.reps, Precision: pt.prec})
				if len(out) > MaxPoints {
					return nil, s.errf("matrix", "expands to more than %d points", MaxPoints)
				}
			}
			k := len(ds) - 1
			for ; k >= 0; k-- {
				idx[k]++
				if idx[k] < ds[k].N {
					break
				}
				idx[k] = 0
			}
			if k < 0 {
				break
			}
		}
	}
	return out, nil
}

// effectiveWorkload applies the matrix's flows, size and zerocopy to a
// workload where they mean something, and clears them from the point's
// parameters where they do not.
func effectiveWorkload(w results.Workload, p *results.Params) results.Workload {
	stream := w.Kind == results.TCPStream || w.Kind == results.UDPStream
	if stream && p.Flows > 0 {
		w.Flows = p.Flows
	}
	if stream && p.Size > 0 {
		w.Length = p.Size
	}
	if w.Kind == results.TCPStream && p.Zerocopy {
		w.Zerocopy = true
	}
	if !stream {
		p.Flows, p.Size = 0, 0
	}
	if w.Kind != results.TCPStream {
		p.Zerocopy = false
	}
	if results.IsHTTP(w.Kind) {
		w = httpWorkload(w, *p)
	}
	return w
}

// checkPortsFor refuses a workload whose port the point's generated
// policies or Services do not carry: the generated policies and the
// measured Service open the iperf3 and rr ports, not HTTPPort; an L7
// point's policy opens HTTPPort alone.
func (s *Spec) checkPortsFor(w results.Workload, p results.Params, path string) error {
	switch {
	case results.IsHTTP(w.Kind) && p.Services > 0:
		return s.errf(path+".services", "%d: the measured Service maps the iperf3 and rr ports, not port %d of the %s workload", p.Services, HTTPPort, w.Kind)
	case results.IsHTTP(w.Kind) && p.ClusterPolicies > 0 && p.ClusterPolicyMatch == results.ClusterMatchLast:
		return s.errf(path+".clusterPolicyMatch", "last: the last cluster policy accepts the iperf3 and rr ports, not port %d of the %s workload", HTTPPort, w.Kind)
	case results.IsHTTP(w.Kind) && p.Policies > 0 && !usesFiller(p):
		return s.errf(path+".policies", "%d: the generated policies allow the iperf3 and rr ports, not port %d of the %s workload (sweep HTTP policies with l7Mode)", p.Policies, HTTPPort, w.Kind)
	case !results.IsHTTP(w.Kind) && p.L7Mode != "" && p.L7Mode != results.L7None:
		return s.errf(path+".l7Mode", "%s: the L7 policy allows TCP port %d alone, not the %s workload's (L7 sweeps measure the http and ab workloads)", p.L7Mode, HTTPPort, w.Kind)
	}
	return nil
}

// series names the line a point is drawn on: the datapath (iptables+ipsets
// with peers: ipsets), with the iptables filler mode when it matters.
func series(p results.Params) string {
	s := string(p.Datapath)
	if s == "" {
		s = string(kind.None)
	}
	joined, after := optionSeries(p)
	s += joined
	// A sweep of cluster policies alone is not one of iptables' filler.
	sweepsNP := p.ClusterPolicyMatch == "" || p.Policies > 0 || p.PolicyMode == results.ModeL4Rules
	if p.L7Mode == "" && sweepsNP && (p.Datapath == kind.IPTables || p.PolicyMode != results.ModeNoMatch && p.PolicyMode != "") {
		s += " " + p.PolicyMode
	}
	s += after
	if p.ServiceProxy != "" && p.ServiceProxy != kind.DefaultProxy(p.Datapath) {
		s += " proxy " + string(p.ServiceProxy)
	}
	if p.L7Mode != "" {
		s += " " + l7Label(p)
	}
	if p.L7Proxy == results.L7ProxyHAProxy {
		s += ", " + results.HAProxyLabel
	}
	return s
}

// chainLengthUnset marks a point whose matrix gives no chainLength, until
// resolveParams fills in the default.
const chainLengthUnset = -1

// DefaultChainLength is the chain preset's length when a matrix gives none.
const DefaultChainLength = 3

// isPreset reports whether a topology value names a preset, not a file.
func isPreset(t string) bool { return slices.Contains(topology.Presets(), t) }

// resolveParams fills defaults and checks the combination.
func (s *Spec) resolveParams(p *results.Params, path string) error {
	if p.Topology == "" {
		p.Topology = "single-host"
	}
	modeGiven := p.PolicyMode != ""
	lengthGiven := p.ChainLength != chainLengthUnset
	if !lengthGiven {
		p.ChainLength = 0
		if p.Topology == "chain" {
			p.ChainLength = DefaultChainLength
		}
	}
	if p.PolicyMode == "" {
		p.PolicyMode = results.ModeNoMatch
	}
	bad := func(key, format string, args ...any) error {
		return s.errf(path+"."+key, format, args...)
	}
	if err := s.resolveKubeParams(p, bad); err != nil {
		return err
	}
	kube := s.Backend == results.BackendKubernetes
	chain := results.IsChain(p.Topology)
	if !isPreset(p.Topology) {
		spec, err := s.loadTopology(p.Topology, topology.Overrides{Name: "check"})
		if err != nil {
			return err
		}
		chain = spec.Chain != nil
	}
	if err := resolveClusterParams(p, chain, bad); err != nil {
		return err
	}
	if kube {
		// setBackend refused what does not apply on a cluster.
	} else if chain {
		switch {
		case p.Datapath != "":
			return bad("datapath", "%s: a chain has no policy datapath (remove datapath: from this sweep)", p.Datapath)
		case p.Policies > 0:
			return bad("policies", "%d: a chain has no policy datapath; use firewallRules for rules in its hops", p.Policies)
		}
		if err := checkOptions(p, true, bad); err != nil {
			return err
		}
		if p.Observe != "" && p.Observe != topology.ObserveOff {
			return bad("observe", "%s: a chain has no policy datapath to observe", p.Observe)
		}
		switch {
		case modeGiven:
			return bad("policyMode", "%s: a chain has no policy datapath", p.PolicyMode)
		case p.Services != 0 || p.ServiceProxy != "" || p.ServiceBackends != 0 || p.ServicePosition != "":
			return bad("services", "a chain has no endpoints to serve Services from")
		case p.L7Mode != "" || p.L7Rules != 0 || p.L7Match != "" || p.L7Proxy != "":
			return bad("l7Mode", "a chain (and topology direct, no CNI) has no policy datapath and no L7 proxy")
		}
		if p.Link != "" && p.Link != topology.ChainVeth && p.Link != topology.ChainBridge && p.Link != topology.ChainOVS {
			return bad("link", "%q: a chain's links are veth, bridge or ovs", p.Link)
		}
		if lengthGiven && !isPreset(p.Topology) {
			return bad("chainLength", "applies to the chain preset; a chain topology file sets its own length")
		}
		if (p.Switches != 0 || p.SwitchLink != "") && p.Link != topology.ChainOVS {
			return bad("switches", "OvS bridges in series apply to link ovs (link %s)", p.Link)
		}
		if p.ShaperDirection != "" && p.ShaperRate == "" {
			return bad("shaperDirection", "%s: applies with a shaperRate", p.ShaperDirection)
		}
		if p.ChainLength == 0 && p.ShaperRate != "" && p.ShaperDirection != topology.ShapeAll && isPreset(p.Topology) {
			return bad("shaperRate", "a direct pair (chainLength 0) has no hop to shape in (shaperDirection all shapes the ends, as seed 001)")
		}
		if lengthGiven && p.Topology == topology.PresetDirect {
			return bad("chainLength", "%d: the direct pair has no hops (use topology chain with chainLength 0 to sweep lengths from it)", p.ChainLength)
		}

	} else {
		switch {
		case lengthGiven:
			return bad("chainLength", "applies to the chain topology only (topology %s)", p.Topology)
		case p.FirewallRules != 0:
			return bad("firewallRules", "network functions go in chain hops: use topology chain")
		case p.FirewallStateful:
			return bad("firewallStateful", "network functions go in chain hops: use topology chain")
		case p.FirewallSpread:
			return bad("firewallSpread", "network functions go in chain hops: use topology chain")
		case p.ShaperRate != "":
			return bad("shaperRate", "network functions go in chain hops: use topology chain")
		case p.ShaperDirection != "":
			return bad("shaperDirection", "network functions go in chain hops: use topology chain")
		case p.Switches != 0 || p.SwitchLink != "":
			return bad("switches", "OvS bridges in series apply to chains with link ovs")
		}
		if p.Link != "" {
			if p.Topology != "multi-host" {
				return bad("link", "applies to the multi-host and chain presets (topology %s)", p.Topology)
			}
			if p.Link != topology.LinkWire && p.Link != topology.LinkVXLAN {
				return bad("link", "%q: hosts are joined by wire or vxlan", p.Link)
			}
		}
		if p.Datapath == "" {
			p.Datapath = kind.Default
			if !isPreset(p.Topology) {
				spec, _ := s.loadTopology(p.Topology, topology.Overrides{Name: "check"})
				p.Datapath = spec.Datapath
			}
		}
		if err := checkOptions(p, false, bad); err != nil {
			return err
		}
		if p.PolicyMode == results.ModeTopOfChain && p.Datapath != kind.IPTables {
			return bad("policyMode", "top-of-chain is an %s filler mode (datapath %s): sweep it in a sweep of its own with datapath [%s]", kind.IPTables, p.Datapath, kind.IPTables)
		}
		if usesFiller(*p) && p.Policies > kind.MaxFiller {
			return bad("policies", "%d filler rules: iptables takes at most %d", p.Policies, kind.MaxFiller)
		}
		if !usesFiller(*p) && p.Policies > maxPortPolicies {
			return bad("policies", "%d: policies generated on ports %d and up take at most %d", p.Policies, fillerPort, maxPortPolicies)
		}
		if err := resolveServiceParams(p, bad); err != nil {
			return err
		}
		if err := resolveL7Params(p, bad); err != nil {
			return err
		}
	}
	// The lab as the point will build it: the topology's own checks (an
	// MTU VXLAN cannot carry, eBPF limits, options of another datapath).
	spec, err := s.labSpec(*p, "check")
	if err != nil {
		return err
	}
	if err := checkHAProxyFamily(*p, spec, bad); err != nil {
		return err
	}
	for _, name := range []string{"client", "server"} {
		ep, err := spec.Endpoint(topology.DefaultNamespace + "/" + name)
		if err != nil || ep.Labels["app"] != name {
			return &input.Error{File: s.File, Path: path + ".topology", Msg: fmt.Sprintf("%s: the workloads run between endpoints default/client (app=client) and default/server (app=server); this topology has no default/%s labelled app=%s", p.Topology, name, name)}
		}
	}
	return nil
}

// loadTopology parses a topology file named in the experiment, relative
// to the experiment file.
func (s *Spec) loadTopology(name string, ov topology.Overrides) (*topology.Spec, error) {
	path, data, err := s.readTopology(name)
	if err != nil {
		msg := err.Error()
		if os.IsNotExist(err) {
			msg = fmt.Sprintf("no such topology file (and not a preset: %s)", strings.Join(topology.Presets(), ", "))
		}
		return nil, &input.Error{File: s.File, Path: "topology", Msg: fmt.Sprintf("%s: %s", name, msg)}
	}
	return topology.Parse(data, path, ov)
}

// readTopologyText is a topology file's text (loadTopology read it
// already, so it exists).
func (s *Spec) readTopologyText(name string) (string, error) {
	_, data, err := s.readTopology(name)
	if err != nil {
		return "", &input.Error{File: s.File, Path: "topology", Msg: fmt.Sprintf("%s: %v", name, err)}
	}
	return string(data), nil
}

// readTopology reads a topology file named in the experiment, relative to
// the experiment file, once per Spec: checking every point, expanding and
// building labs read the bytes read first.
func (s *Spec) readTopology(name string) (path string, data []byte, err error) {
	path = name
	if !filepath.IsAbs(path) {
		path = filepath.Join(s.Dir, name)
	}
	c := s.cache()
	c.filesMu.Lock()
	defer c.filesMu.Unlock()
	f, ok := c.topologies[path]
	if !ok {
		f.data, f.err = files.ReadInput(path)
		c.topologies[path] = f
	}
	return path, f.data, f.err
}

// fixedIP finds an endpoint's ip: key in a topology file.
var fixedIP = regexp.MustCompile(`(?m)^\s*(-\s+)?ip:\s*\S`)

func maxCPU() int { return runtime.NumCPU() }

// specCache holds what a Spec computes or reads once: its points and the
// topology files it names.
type specCache struct {
	pointsMu   sync.Mutex
	expanded   bool
	points     []results.Point
	pointsErr  error
	filesMu    sync.Mutex
	topologies map[string]topologyFile // by path
}

type topologyFile struct {
	data []byte
	err  error
}

// cache is the Spec's cache, made on first use.
func (s *Spec) cache() *specCache {
	if s.c == nil {
		s.c = &specCache{topologies: map[string]topologyFile{}}
	}
	return s.c
}

// forgetPoints drops the expansion: the fields it came from changed.
func (s *Spec) forgetPoints() {
	c := s.cache()
	c.pointsMu.Lock()
	c.expanded, c.points, c.pointsErr = false, nil, nil
	c.pointsMu.Unlock()
}
