package experiment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/l7proxy/haproxy"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// labSpec resolves the topology a point needs, as lab name.
func (s *Spec) labSpec(p results.Params, name string) (*topology.Spec, error) {
	ov := topology.Overrides{Name: name, MTU: p.MTU, Proxy: string(p.ServiceProxy), Observe: p.Observe, Options: kind.Overrides{HostRouting: p.HostRouting, Peers: p.Peers, SocketLB: p.SocketLB}}
	if p.Datapath != "" {
		ov.Datapath = string(p.Datapath)
	}
	if usesFiller(p) {
		n := p.Policies
		ov.Options.Filler, ov.Options.FillerMode = &n, p.PolicyMode
	}
	switch {
	case results.IsChain(p.Topology):
		return topology.Parse([]byte(chainYAML(p)), s.File+" (the chain preset with this point's functions)", ov)
	case isPreset(p.Topology):
		return topology.Preset(p.Topology, topology.PresetOptions{Link: p.Link, DualStack: p.IPFamily != 0}, ov)
	}
	spec, err := s.loadTopology(p.Topology, ov)
	if err == nil && p.IPFamily != 0 && !spec.HasFamily(p.IPFamily) {
		return nil, &input.Error{File: s.File, Path: "ipFamily", Msg: fmt.Sprintf("%d: topology %s has no IPv%d pod prefix (give its hosts podCIDRs of both families, as examples/dual-stack.yaml does)", p.IPFamily, p.Topology, p.IPFamily)}
	}
	return spec, err
}

// serverAddr is the address the workloads connect to at a point: the
// server's address of the point's family (its primary one when the point
// sets none).
func serverAddr(sv *topology.Endpoint, p results.Params) netip.Addr {
	if a, ok := sv.Addr(p.IPFamily); ok {
		return a
	}
	return sv.IP
}

// chainYAML is the chain preset as a topology file, with the point's
// network functions in every hop.
func chainYAML(p results.Params) string {
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

// checkBackend checks, before a run creates anything, that s was parsed
// for where o measures (ParseFor), and that a lab's tools are installed.
func checkBackend(s *Spec, o Options, points []results.Point) error {
	switch {
	case o.Backend != nil && s.Backend != results.BackendKubernetes:
		return fmt.Errorf("backend %s given for an experiment parsed for %q (ParseFor)", results.BackendKubernetes, s.Backend)
	case o.Backend != nil:
		return nil
	case s.Backend != "":
		return fmt.Errorf("the experiment is set for backend %s, and no backend was given", s.Backend)
	}
	return checkTools(points)
}

// newBackend is where the run measures: the cluster o.Backend, or a lab
// on this machine.
func newBackend(o Options, env *results.Environment, note func(string)) backend {
	if o.Backend != nil {
		return &clusterBackend{cl: o.Backend, run: o.LabName, out: o.Out, unenforced: o.Unenforced, enforceTimeout: o.EnforceTimeout, note: note}
	}
	return &labBackend{out: o.Out, env: env, rr: o.RR, note: note}
}

// labBackend measures in a lab on this machine (package lab): one lab up
// at a time, its policies and Services replaced point by point.
type labBackend struct {
	out     string
	env     *results.Environment
	rr      []string // argv of cnlab's rr command
	note    func(string)
	envDone bool // environment.json has the first lab's offloads and MTU

	cur    *topology.Spec // the lab that is up, if any
	curPol string         // policy text applied to it
	curSvc string         // Service text installed in it
	curVIP netip.Addr     // the measured Service's cluster IP, if any
	curObs string         // its observe level ("": not known)
}

func (l *labBackend) name() string                                           { return results.BackendLab }
func (l *labBackend) describe(context.Context) (*results.ClusterInfo, error) { return nil, nil }

// up takes the lab that is up down and builds spec.
func (l *labBackend) up(ctx context.Context, spec *topology.Spec, p results.Params, prev, b *results.Build) error {
	if err := l.down(prev); err != nil {
		return fmt.Errorf("%w: %w", errTeardown, err)
	}
	l.note(fmt.Sprintf("building lab %s: %s", spec.Name, describeLab(p)))
	t0 := time.Now()
	err := lab.Up(ctx, spec, lab.UpOptions{})
	b.UpSeconds = time.Since(t0).Seconds()
	b.MTU = spec.MTU
	if err == nil && !l.envDone {
		l.envDone = true
		l.env.Offloads = clientOffloads(spec)
		l.env.DefaultMTU = spec.MTU
		_ = files.WriteJSON(filepath.Join(l.out, "environment.json"), l.env, true)
	}
	if err == nil && p.Offloads != "" {
		b.Offloads = p.Offloads
		err = setOffloads(ctx, spec, p.Offloads)
	}
	if errors.Is(err, lab.ErrAlreadyUp) {
		// Not this run's lab (another run drew the same name, or a user
		// took it meanwhile): never tear it down.
		b.Error = err.Error()
		return fmt.Errorf("build lab %s: %w: another run or a user took the name; it is left as it is", spec.Name, err)
	}
	if err != nil {
		b.Error = err.Error()
		_ = lab.Down(spec.Name, nil)
		return fmt.Errorf("build lab (%s): %w", describeLab(p), err)
	}
	l.cur, l.curPol, l.curSvc, l.curVIP, l.curObs = spec, "", "", netip.Addr{}, spec.ObserveLevel()
	return nil
}

// observe changes the level the lab records at to the point's, when it
// gives one and the lab is at another.
func (l *labBackend) observe(ctx context.Context, p results.Params, b *results.Build) error {
	if p.Observe == "" || p.Observe == l.curObs {
		return nil
	}
	t0 := time.Now()
	_, err := lab.SetObserve(ctx, l.cur.Name, p.Observe)
	a := results.ObserveApply{Level: p.Observe, Seconds: time.Since(t0).Seconds()}
	if err != nil {
		a.Error = err.Error()
		l.curObs = "" // the next point sets its level whatever it is
	} else {
		l.curObs = p.Observe
	}
	b.ObserveApply = append(b.ObserveApply, a)
	if err != nil {
		return fmt.Errorf("observe %s: %w", p.Observe, err)
	}
	return nil
}

// sample runs the workloads in the lab's client and server namespaces.
func (l *labBackend) sample(pr *results.PointResult, dest netip.Addr) (sampleEnv, error) {
	cl, err := l.cur.Endpoint("default/client")
	if err != nil {
		return sampleEnv{}, err
	}
	sv, err := l.cur.Endpoint("default/server")
	if err != nil {
		return sampleEnv{}, err
	}
	cur := l.cur
	return sampleEnv{ep: endpoints{client: cl.Netns, server: sv.Netns, serverIP: serverAddr(sv, pr.Params), dest: dest}, rr: l.rr, cnlab: cnlabArgv(l.rr), lab: cur.Name,
		host: localHost{}, listenWait: 5 * time.Second,
		settle: func(ctx context.Context, w results.Workload, log io.Writer) error {
			if w.Kind != results.UDPStream {
				return nil
			}
			return settleReassembly(ctx, cur, log)
		},
		counters: func(ctx context.Context, p results.Params, log io.Writer) map[string][]results.RuleCounter {
			return labCounters(ctx, cur, p, log)
		},
		policyCounters: policyCounterReader(cur)}, nil
}

func describeLab(p results.Params) string {
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
	if results.IsChain(p.Topology) {
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

// policies applies the point's policies to the lab, replacing what the
// previous point applied, and records how long the update took.
func (l *labBackend) policies(ctx context.Context, p results.Params, b *results.Build, _ int) error {
	text := policyText(p)
	if text == l.curPol {
		return nil
	}
	pols, err := parseGenerated(text)
	if err != nil {
		return err
	}
	// HAProxy holds the proxy's port: cnlab's proxy takes it back for
	// the change (lab.Replace starts it where it is not running).
	if err := haproxy.StopAll(ctx, l.cur); err != nil {
		l.curPol = policyUnknown
		return err
	}
	t0 := time.Now()
	ch, err := lab.Replace(ctx, l.cur.Name, pols)
	a := results.Apply{Policies: p.Policies, PolicyMode: p.PolicyMode, L7Mode: p.L7Mode, L7Rules: p.L7Rules, L7Match: p.L7Match, Seconds: time.Since(t0).Seconds()}
	recordCluster(&a, p)
	if err != nil {
		a.Error = err.Error()
	}
	b.PolicyApply = append(b.PolicyApply, a)
	if err != nil {
		// The datapath may hold part of the new set: the next point must
		// apply its policies whatever they are.
		l.curPol = policyUnknown
		if p.L7Mode != "" {
			return fmt.Errorf("apply the L7 policy (%s): %w", l7Label(p), err)
		}
		return fmt.Errorf("apply %s: %w", policiesLabel(p), err)
	}
	if p.L7Proxy == results.L7ProxyHAProxy {
		if err := startHAProxy(ctx, l.cur, ch.Compiled); err != nil {
			l.curPol = policyUnknown
			return fmt.Errorf("apply the L7 policy (%s): %w", l7Label(p), err)
		}
	}
	l.curPol = text
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

// down takes the lab down, recording how long that took in b.
func (l *labBackend) down(b *results.Build) error {
	if l.cur == nil {
		return nil
	}
	t0 := time.Now()
	if herr := haproxy.StopAll(context.Background(), l.cur); herr != nil && l.note != nil {
		l.note(fmt.Sprintf("lab %s: %v (the lab's down removes what is left)", l.cur.Name, herr))
	}
	err := lab.Down(l.cur.Name, nil)
	if b != nil {
		b.TeardownSecs = time.Since(t0).Seconds()
	}
	if err != nil {
		if b != nil {
			b.Error = "teardown: " + err.Error()
		}
		return fmt.Errorf("tear down lab %s: %w (remove it with: cnlab down %s)", l.cur.Name, err, l.cur.Name)
	}
	l.cur = nil
	return nil
}

// localHost runs a lab's processes in its namespaces on this machine.
type localHost struct{}

func (localHost) start(ctx context.Context, ns string, argv []string, stdout, stderr io.Writer) (process, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = localGrace
	if err := netns.Start(ns, cmd); err != nil {
		return nil, err
	}
	return localProc{cmd}, nil
}

func (localHost) procStat(context.Context, string) ([]byte, error) { return os.ReadFile("/proc/stat") }

// localGrace is how long a local process has to exit after SIGTERM.
const localGrace = 3 * time.Second

// localProc is a process in a namespace of this machine.
type localProc struct{ cmd *exec.Cmd }

func (p localProc) wait() error { return p.cmd.Wait() }

func (p localProc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(localGrace):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// exited reports whether a child that was not waited for has exited (a
// zombie), so a server that fails at once is not waited on for seconds.
func (p localProc) exited() bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] == 'Z'
}

func (p localProc) cpuTime() (time.Duration, bool) {
	st := p.cmd.ProcessState
	if st == nil {
		return 0, true
	}
	return st.UserTime() + st.SystemTime(), true
}

// socketTable reads the process's namespace's table through
// /proc/PID/net.
func (p localProc) socketTable(_ context.Context, table string) ([]byte, error) {
	return os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", p.cmd.Process.Pid, table))
}
