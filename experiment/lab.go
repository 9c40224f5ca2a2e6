package experiment

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// labSpec resolves the topology a point needs, as lab name.
func (s *Spec) labSpec(p Params, name string) (*topology.Spec, error) {
	ov := topology.Overrides{Name: name, MTU: p.MTU, Proxy: string(p.ServiceProxy), Options: kind.Overrides{HostRouting: p.HostRouting, Peers: p.Peers, SocketLB: p.SocketLB}}
	if p.Datapath != "" {
		ov.Datapath = string(p.Datapath)
	}
	if usesFiller(p) {
		n := p.Policies
		ov.Options.Filler, ov.Options.FillerMode = &n, p.PolicyMode
	}
	switch {
	case isChain(p.Topology):
		return topology.Parse([]byte(chainYAML(p)), s.File+" (the chain preset with this point's functions)", ov)
	case isPreset(p.Topology):
		return topology.Preset(p.Topology, topology.PresetOptions{Link: p.Link}, ov)
	default:
		return s.loadTopology(p.Topology, ov)
	}
}

// chainYAML is the chain preset as a topology file, with the point's
// network functions in every hop.
func chainYAML(p Params) string {
	n := p.ChainLength
	link := p.Link
	if link == "" {
		link = topology.ChainVeth
	}
	var fns []string
	if p.FirewallRules > 0 || p.FirewallStateful {
		fns = append(fns, fmt.Sprintf("{kind: firewall, rules: %d, stateful: %t, spread: %t}", p.FirewallRules, p.FirewallStateful, p.FirewallSpread))
	}
	if p.ShaperRate != "" {
		dir := p.ShaperDirection
		if dir == "" {
			dir = topology.ShapeToServer
		}
		fns = append(fns, fmt.Sprintf("{kind: shaper, rate: %q, direction: %s}", p.ShaperRate, dir))
	}
	var sw string
	if p.Switches > 0 {
		sw += fmt.Sprintf(", switches: %d", p.Switches)
	}
	if p.SwitchLink != "" {
		sw += ", switchLink: " + p.SwitchLink
	}
	return fmt.Sprintf("name: chain\nchain: {length: %d, link: %s%s, functions: [%s]}\n", n, link, sw, strings.Join(fns, ", "))
}

// ensureLab makes the point's lab the one that is up.
func (ru *runner) ensureLab(ctx context.Context, p Params) error {
	key := labKey(p)
	if ru.cur != nil && ru.curKey == key {
		return nil
	}
	if err := ru.teardown(); err != nil {
		return fmt.Errorf("%w: %w", errTeardown, err)
	}
	spec, err := ru.s.labSpec(p, ru.o.LabName)
	if err != nil {
		return err
	}
	b := Build{Key: key, Params: p, At: time.Now().UTC()}
	b.Params.Flows, b.Params.Size, b.Params.Zerocopy = 0, 0, false
	ru.prog.note(fmt.Sprintf("building lab %s: %s", spec.Name, describeLab(p)))
	t0 := time.Now()
	err = lab.Up(ctx, spec, lab.UpOptions{})
	b.UpSeconds = time.Since(t0).Seconds()
	b.MTU = spec.MTU
	if err == nil && !ru.envDone {
		ru.envDone = true
		ru.env.Offloads = clientOffloads(spec)
		ru.env.DefaultMTU = spec.MTU
		_ = files.WriteJSON(filepath.Join(ru.o.Out, "environment.json"), ru.env, true)
	}
	if err == nil && p.Offloads != "" {
		b.Offloads = p.Offloads
		err = setOffloads(ctx, spec, p.Offloads)
	}
	if errors.Is(err, lab.ErrAlreadyUp) {
		// Not this run's lab (another run drew the same name, or a user
		// took it meanwhile): never tear it down.
		b.Error = err.Error()
		ru.r.Builds = append(ru.r.Builds, b)
		return fmt.Errorf("build lab %s: %w: another run or a user took the name; it is left as it is", spec.Name, err)
	}
	if err != nil {
		b.Error = err.Error()
		ru.r.Builds = append(ru.r.Builds, b)
		_ = lab.Down(spec.Name, nil)
		return fmt.Errorf("build lab (%s): %w", describeLab(p), err)
	}
	ru.r.Builds = append(ru.r.Builds, b)
	ru.cur, ru.curKey, ru.curBuild, ru.curPol = spec, key, len(ru.r.Builds)-1, ""
	ru.curSvc, ru.curVIP = "", netip.Addr{}
	return nil
}

func describeLab(p Params) string {
	parts := []string{p.Topology}
	if p.Datapath != "" {
		parts = append(parts, string(p.Datapath))
	}
	if usesFiller(p) {
		parts = append(parts, fmt.Sprintf("%s %s", plural.N(p.Policies, "filler rule"), p.PolicyMode))
	}
	if p.Peers != "" {
		parts = append(parts, "peers "+p.Peers)
	}
	if p.ServiceProxy != "" {
		parts = append(parts, "service proxy "+string(p.ServiceProxy))
	}
	if p.Link != "" {
		parts = append(parts, p.Link)
	}
	if isChain(p.Topology) {
		parts = append(parts, fmt.Sprintf("length %d", p.ChainLength))
	}
	if p.MTU > 0 {
		parts = append(parts, fmt.Sprintf("mtu %d", p.MTU))
	}
	if p.Offloads != "" {
		parts = append(parts, "offloads "+p.Offloads)
	}
	if p.FirewallRules > 0 {
		parts = append(parts, fmt.Sprintf("firewall %s stateful=%t spread=%t", plural.N(p.FirewallRules, "rule"), p.FirewallStateful, p.FirewallSpread))
	}
	if p.ShaperRate != "" {
		parts = append(parts, "shaper "+p.ShaperRate)
		if p.ShaperDirection != "" {
			parts = append(parts, "on "+p.ShaperDirection)
		}
	}
	if p.Switches > 0 {
		parts = append(parts, fmt.Sprintf("%d switches", p.Switches))
	}
	if p.SwitchLink != "" {
		parts = append(parts, "joined by "+p.SwitchLink)
	}
	return strings.Join(parts, ", ")
}

// ensurePolicies applies the point's policies to the lab, replacing what
// the previous point applied, and records how long the update took.
func (ru *runner) ensurePolicies(ctx context.Context, p Params) error {
	text := policyText(p)
	if text == ru.curPol {
		return nil
	}
	pols, err := parseGenerated(text)
	if err != nil {
		return err
	}
	t0 := time.Now()
	_, err = lab.Replace(ctx, ru.cur.Name, pols)
	a := Apply{Policies: p.Policies, PolicyMode: p.PolicyMode, L7Mode: p.L7Mode, L7Rules: p.L7Rules, L7Match: p.L7Match, Seconds: time.Since(t0).Seconds()}
	if err != nil {
		a.Error = err.Error()
	}
	b := &ru.r.Builds[ru.curBuild]
	b.PolicyApply = append(b.PolicyApply, a)
	if err != nil {
		// The datapath may hold part of the new set: the next point must
		// apply its policies whatever they are.
		ru.curPol = policyUnknown
		if p.L7Mode != "" {
			return fmt.Errorf("apply the L7 policy (%s): %w", l7Label(p), err)
		}
		return fmt.Errorf("apply %d %s policies: %w", p.Policies, p.PolicyMode, err)
	}
	ru.curPol = text
	return nil
}

// parseGenerated parses generated policies (none for "").
func parseGenerated(text string) ([]*policy.Policy, error) {
	if text == "" {
		return nil, nil
	}
	return policy.Parse([]byte(text), "generated policies")
}

// policyUnknown is never a generated policy text.
const policyUnknown = "\x00unknown"

// teardown takes the current lab down, even after Ctrl-C. A lab that
// cannot be taken down is an error of the whole run: every later build
// of the same name would fail.
func (ru *runner) teardown() error {
	if ru.o.Backend != nil {
		return ru.teardownCluster()
	}
	if ru.cur == nil {
		return nil
	}
	t0 := time.Now()
	err := lab.Down(ru.cur.Name, nil)
	ru.r.Builds[ru.curBuild].TeardownSecs = time.Since(t0).Seconds()
	if err != nil {
		ru.r.Builds[ru.curBuild].Error = "teardown: " + err.Error()
		return fmt.Errorf("tear down lab %s: %w (remove it with: cnlab down %s)", ru.cur.Name, err, ru.cur.Name)
	}
	ru.cur, ru.curKey = nil, ""
	return nil
}
