package experiment

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/profile"
	"github.com/cnlab/cnlab/topology"
)

// ErrInterrupted is returned by Run when its context ended: the results
// directory holds a valid partial run.
var ErrInterrupted = errors.New("interrupted: finished points are kept, the lab is torn down")

// Options tune a run.
type Options struct {
	Out      string    // results directory: must not hold a run already
	RR       []string  // argv of cnlab's rr command (default: this executable + "rr")
	Progress io.Writer // progress lines (nil: none)
	Terminal bool      // Progress is a terminal: one updating bar instead of lines
	LabName  string    // default: "xp-" and 4 random hex digits
	Seed     *int64    // overrides the file's seed
}

// Run runs an experiment and writes its results directory. text is the
// experiment file as given (kept in results.json). A point that fails is
// recorded with its error and the run goes on; when ctx ends (Ctrl-C) the
// finished points are kept, results.json is marked interrupted, the lab
// is torn down and ErrInterrupted is returned.
func Run(ctx context.Context, s *Spec, text []byte, o Options) (*Results, error) {
	points, err := s.Points()
	if err != nil {
		return nil, err
	}
	if err := checkTools(points); err != nil {
		return nil, err
	}
	if o.Out == "" {
		return nil, errors.New("no results directory given")
	}
	if _, err := os.Stat(filepath.Join(o.Out, "results.json")); err == nil {
		return nil, &InputError{File: o.Out, Msg: "already holds a run (results.json): choose another --out"}
	}
	if err := os.MkdirAll(filepath.Join(o.Out, "logs"), 0o755); err != nil {
		return nil, err
	}
	if o.RR == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find cnlab's own executable for the rr workloads: %w", err)
		}
		o.RR = []string{exe, "rr"}
	}
	if o.LabName == "" {
		var b [2]byte
		_, _ = rand.Read(b[:])
		o.LabName = fmt.Sprintf("xp-%x", b)
	}
	seed := int64(0)
	switch {
	case o.Seed != nil:
		seed = *o.Seed
	case s.Seed != nil:
		seed = *s.Seed
	default:
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = int64(binary.LittleEndian.Uint64(b[:]) >> 1)
	}
	env := CaptureEnvironment()
	r := &Results{Schema: Schema, Cnlab: env.Cnlab, Seed: seed, Lab: o.LabName, StartedAt: time.Now().UTC(), Status: StatusRunning,
		Experiment: ExperimentInfo{File: s.File, Name: s.Name, Quick: s.IsQuick(), Text: string(text), Spec: s}, Builds: []Build{}}
	byID := map[string]*PointResult{}
	for _, p := range points {
		r.Points = append(r.Points, PointResult{Point: p, Status: PointPending, Samples: []Sample{}, Summary: map[string]Summary{}})
	}
	for i := range r.Points {
		byID[r.Points[i].ID] = &r.Points[i]
	}
	r.Order = schedule(points, s.Repetitions, mrand.New(mrand.NewSource(seed)))
	if err := r.write(o.Out); err != nil {
		return nil, err
	}
	if err := files.WriteJSON(filepath.Join(o.Out, "environment.json"), env, true); err != nil {
		return nil, err
	}
	ru := &runner{s: s, o: o, r: r, env: env, byID: byID}
	ru.prog = newProgress(o.Progress, o.Terminal, len(r.Order), time.Duration(s.Warmup+s.Duration))
	err = ru.run(ctx)
	now := time.Now().UTC()
	r.FinishedAt = &now
	switch {
	case ctx.Err() != nil:
		r.Status = StatusInterrupted
		err = ErrInterrupted
	case err != nil:
		r.Status, r.Error = StatusFailed, err.Error()
	default:
		r.Status = StatusComplete
	}
	for i := range r.Points {
		p := &r.Points[i]
		if r.Status != StatusComplete && p.Status == PointPending && len(p.Samples) > 0 {
			p.Status = PointPartial
		}
	}
	if werr := files.WriteJSON(filepath.Join(o.Out, "environment.json"), env, true); werr != nil && err == nil {
		err = werr
	}
	if werr := r.write(o.Out); werr != nil && err == nil {
		err = werr
	}
	ru.prog.finish(r)
	return r, err
}

// schedule orders the jobs: each repetition is a round (a point with
// fewer repetitions than others sits out the last rounds); in a round the
// labs come in a random order and each lab's points in a random order, so
// drift of the machine over the run does not line up with a parameter,
// while a lab is built once per round. Profiled runs come last.
func schedule(points []Point, reps int, rng *mrand.Rand) []Job {
	groups := map[string][]Point{}
	var keys []string
	for _, p := range points {
		k := labKey(p.Params)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p)
	}
	var jobs []Job
	round := func(rep int, keep func(Point) bool) {
		order := append([]string(nil), keys...)
		if rng != nil {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		for _, k := range order {
			ps := append([]Point(nil), groups[k]...)
			if rng != nil {
				rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
			}
			for _, p := range ps {
				if keep(p) {
					jobs = append(jobs, Job{Point: p.ID, Repetition: rep})
				}
			}
		}
	}
	// reps is the default of points that do not say.
	repsOf := func(p Point) int {
		if p.Repetitions > 0 {
			return p.Repetitions
		}
		return reps
	}
	rounds := 0
	for _, p := range points {
		rounds = max(rounds, repsOf(p))
	}
	for rep := 0; rep < rounds; rep++ {
		round(rep, func(p Point) bool { return rep < repsOf(p) })
	}
	round(-1, func(p Point) bool { return p.Profile })
	return jobs
}

// checkTools fails early when a workload's tool is missing.
func checkTools(points []Point) error {
	need := map[string]string{}
	for _, p := range points {
		switch p.Workload.Kind {
		case TCPStream, UDPStream:
			need["iperf3"] = "apt-get install iperf3"
		case Ping:
			need["ping"] = "apt-get install iputils-ping"
		}
		if p.Params.Offloads != "" {
			need["ethtool"] = "apt-get install ethtool"
		}
	}
	for _, tool := range sortedKeys(need) {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (%s; or run scripts/install.sh)", tool, need[tool])
		}
	}
	return nil
}

type runner struct {
	s    *Spec
	o    Options
	r    *Results
	env  *Environment
	byID map[string]*PointResult
	prog *progress

	cur      *topology.Spec // the lab that is up, if any
	curKey   string
	curBuild int    // index in r.Builds
	curPol   string // policy text applied to it
	envDone  bool
}

func (ru *runner) run(ctx context.Context) (err error) {
	defer func() {
		if terr := ru.teardown(); terr != nil && err == nil {
			err = terr
		}
	}()
	failedLab := map[string]string{} // a lab that failed to build, per round
	for i, j := range ru.r.Order {
		if ctx.Err() != nil {
			return nil
		}
		pr := ru.byID[j.Point]
		if pr.Status == PointFailed {
			ru.prog.step(i, pr, j, "skipped (failed before)")
			continue
		}
		ru.prog.step(i, pr, j, "")
		key := fmt.Sprintf("%d %s", j.Repetition, labKey(pr.Params))
		if msg, ok := failedLab[key]; ok {
			ru.fail(pr, msg)
			continue
		}
		err := ru.job(ctx, pr, j)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errTeardown) {
			return err
		}
		if err != nil {
			if errors.Is(err, errLab) {
				failedLab[key] = err.Error()
			}
			ru.fail(pr, err.Error())
			ru.prog.note(fmt.Sprintf("%s failed: %v", pr.ID, err))
		} else if pr.Status == PointPending && len(pr.Samples) == pr.Repetitions {
			pr.Status = PointDone
		}
		if werr := ru.r.write(ru.o.Out); werr != nil {
			return werr
		}
	}
	return nil
}

func (ru *runner) fail(pr *PointResult, msg string) {
	pr.Status = PointFailed
	if pr.Error == "" {
		pr.Error = msg
	}
}

// errLab marks a failure to build or configure a lab; errTeardown one to
// take it down, which ends the run.
var (
	errLab      = errors.New("lab")
	errTeardown = errors.New("teardown")
)

type labError struct{ err error }

func (e labError) Error() string        { return e.err.Error() }
func (e labError) Is(target error) bool { return target == errLab }
func (e labError) Unwrap() error        { return e.err }

// job runs one repetition of a point (or its profiled run).
func (ru *runner) job(ctx context.Context, pr *PointResult, j Job) error {
	if err := ru.ensureLab(ctx, pr.Params); err != nil {
		return labError{err}
	}
	if err := ru.ensurePolicies(ctx, pr.Params); err != nil {
		return err // this point's policies only: the lab's other points go on
	}
	cl, err := ru.cur.Endpoint("default/client")
	if err != nil {
		return err
	}
	sv, err := ru.cur.Endpoint("default/server")
	if err != nil {
		return err
	}
	logName := filepath.Join("logs", fmt.Sprintf("%s-r%d.log", pr.ID, j.Repetition))
	if j.Repetition < 0 {
		logName = filepath.Join("logs", pr.ID+"-profile.log")
	}
	logf, err := os.Create(filepath.Join(ru.o.Out, logName))
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "point %s %s repetition %d\nparams %+v\nworkload %+v\n", pr.ID, pr.Workload.Name(), j.Repetition, pr.Params, pr.Workload)
	e := sampleEnv{ep: endpoints{client: cl.Netns, server: sv.Netns, serverIP: sv.IP}, warmup: time.Duration(ru.s.Warmup),
		duration: time.Duration(ru.s.Duration), pin: ru.s.Pin, rr: ru.o.RR, log: logf}
	if j.Repetition < 0 {
		return ru.profiled(ctx, pr, e, logName)
	}
	t0 := time.Now()
	m, err := runSample(ctx, pr.Workload, e)
	if err != nil {
		fmt.Fprintf(logf, "error: %v\n", err)
		return err
	}
	pr.Samples = append(pr.Samples, Sample{Repetition: j.Repetition, At: t0.UTC(), Seconds: time.Since(t0).Seconds(), Metrics: m, Log: logName})
	pr.summarize()
	ru.prog.result(pr, m)
	return nil
}

// labSpec resolves the topology a point needs, as lab name.
func (s *Spec) labSpec(p Params, name string) (*topology.Spec, error) {
	ov := topology.Overrides{Name: name, MTU: p.MTU, HostRouting: p.HostRouting}
	if p.Datapath != "" {
		ov.Datapath = p.Datapath
	}
	if usesFiller(p) {
		n := p.Policies
		ov.Filler, ov.FillerMode = &n, p.PolicyMode
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
	if n == 0 {
		n = 3
	}
	link := p.Link
	if link == "" {
		link = topology.ChainVeth
	}
	var fns []string
	if p.FirewallRules > 0 || p.FirewallStateful {
		fns = append(fns, fmt.Sprintf("{kind: firewall, rules: %d, stateful: %t, spread: %t}", p.FirewallRules, p.FirewallStateful, p.FirewallSpread))
	}
	if p.ShaperRate != "" {
		fns = append(fns, fmt.Sprintf("{kind: shaper, rate: %q}", p.ShaperRate))
	}
	return fmt.Sprintf("name: chain\nchain: {length: %d, link: %s, functions: [%s]}\n", n, link, strings.Join(fns, ", "))
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
	err = lab.Up(ctx, spec, topology.UpOptions{})
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
	if err != nil {
		b.Error = err.Error()
		ru.r.Builds = append(ru.r.Builds, b)
		_ = topology.Down(spec.Name, nil)
		return fmt.Errorf("build lab (%s): %w", describeLab(p), err)
	}
	ru.r.Builds = append(ru.r.Builds, b)
	ru.cur, ru.curKey, ru.curBuild, ru.curPol = spec, key, len(ru.r.Builds)-1, ""
	return nil
}

// clientOffloads reads the offloads of the client's eth0 as the lab was
// built (ethtool -k), before any offloads: value of the matrix.
func clientOffloads(spec *topology.Spec) map[string]string {
	cl, err := spec.Endpoint("default/client")
	if err != nil {
		return nil
	}
	cmd := exec.Command("ethtool", "-k", "eth0")
	var out strings.Builder
	cmd.Stdout = &out
	if netns.Start(cl.Netns, cmd) != nil || cmd.Wait() != nil {
		return nil
	}
	return parseEthtoolK(out.String())
}

func describeLab(p Params) string {
	parts := []string{p.Topology}
	if p.Datapath != "" {
		parts = append(parts, p.Datapath)
	}
	if usesFiller(p) {
		parts = append(parts, fmt.Sprintf("%s %s", plural.N(p.Policies, "filler rule"), p.PolicyMode))
	}
	if p.Link != "" {
		parts = append(parts, p.Link)
	}
	if p.ChainLength > 0 {
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
	var pols []*policy.Policy
	if text != "" {
		var err error
		if pols, err = policy.Parse([]byte(text), "generated policies"); err != nil {
			return err
		}
	}
	t0 := time.Now()
	_, err := lab.Replace(ctx, ru.cur.Name, pols)
	a := Apply{Policies: p.Policies, PolicyMode: p.PolicyMode, Seconds: time.Since(t0).Seconds()}
	if err != nil {
		a.Error = err.Error()
	}
	b := &ru.r.Builds[ru.curBuild]
	b.PolicyApply = append(b.PolicyApply, a)
	if err != nil {
		// The datapath may hold part of the new set: the next point must
		// apply its policies whatever they are.
		ru.curPol = policyUnknown
		return fmt.Errorf("apply %d %s policies: %w", p.Policies, p.PolicyMode, err)
	}
	ru.curPol = text
	return nil
}

// policyUnknown is never a generated policy text.
const policyUnknown = "\x00unknown"

// teardown takes the current lab down, even after Ctrl-C. A lab that
// cannot be taken down is an error of the whole run: every later build
// of the same name would fail.
func (ru *runner) teardown() error {
	if ru.cur == nil {
		return nil
	}
	t0 := time.Now()
	err := topology.Down(ru.cur.Name, nil)
	ru.r.Builds[ru.curBuild].TeardownSecs = time.Since(t0).Seconds()
	if err != nil {
		ru.r.Builds[ru.curBuild].Error = "teardown: " + err.Error()
		return fmt.Errorf("tear down lab %s: %w (remove it with: cnlab down %s)", ru.cur.Name, err, ru.cur.Name)
	}
	ru.cur, ru.curKey = nil, ""
	return nil
}

// setOffloads runs ethtool -K on every interface of every namespace of
// the lab.
func setOffloads(ctx context.Context, spec *topology.Spec, v string) error {
	set, err := parseOffloads(v)
	if err != nil {
		return err
	}
	names, err := netns.List(topology.LabNetnsPrefix(spec.Name))
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, ns := range names {
		h, err := netns.Handle(ns)
		if err != nil {
			return err
		}
		links, err := h.LinkList()
		h.Close()
		if err != nil {
			return err
		}
		for _, l := range links {
			dev := l.Attrs().Name
			if dev == "lo" {
				continue
			}
			argv := []string{"-K", dev}
			for _, k := range sortedKeys(set) {
				argv = append(argv, k, set[k])
			}
			cmd := exec.CommandContext(ctx, "ethtool", argv...)
			var out strings.Builder
			cmd.Stderr = &out
			if err := netns.Start(ns, cmd); err != nil {
				return err
			}
			if err := cmd.Wait(); err != nil {
				return fmt.Errorf("ethtool %s in %s: %v: %s", strings.Join(argv, " "), ns, err, strings.TrimSpace(out.String()))
			}
		}
	}
	return nil
}

// profiled runs a point once more under perf: its samples are kept apart
// (profiling costs CPU, so they are not mixed with the measured ones),
// with iptables rule counters of every namespace that has rules.
func (ru *runner) profiled(ctx context.Context, pr *PointResult, e sampleEnv, logName string) error {
	res := &ProfileResult{Log: logName}
	pr.Prof = res
	p, err := profile.Start(ctx, profile.Options{Dir: filepath.Join(ru.o.Out, "profiles", pr.ID)})
	if err != nil {
		res.Error = err.Error()
		return nil // a profile that cannot run does not fail the point
	}
	before := ru.counters(ctx, pr.Params, e.log)
	m, werr := runSample(ctx, pr.Workload, e)
	kres, perr := p.Stop()
	res.Metrics, res.Kernel = m, kres
	switch {
	case werr != nil:
		res.Error = werr.Error()
	case perr != nil:
		res.Error = perr.Error()
	}
	if before != nil {
		res.IPTables = map[string][]profile.RuleCounter{}
		for ns, after := range ru.counters(ctx, pr.Params, e.log) {
			res.IPTables[ns] = counterDelta(before[ns], after)
		}
	}
	return nil
}

// counters reads the iptables rule counters of every namespace of the
// lab that has rules (hosts with the iptables datapath, chain hops with a
// firewall); nil when there are none.
func (ru *runner) counters(ctx context.Context, p Params, log io.Writer) map[string][]profile.RuleCounter {
	if p.Datapath != "iptables" && p.FirewallRules == 0 {
		return nil
	}
	var nss []string
	for _, h := range ru.cur.Hosts {
		nss = append(nss, h.Netns)
	}
	if ru.cur.Chain != nil {
		for _, n := range ru.cur.Chain.Nodes {
			nss = append(nss, n.Netns)
		}
	}
	out := map[string][]profile.RuleCounter{}
	for _, ns := range nss {
		rc, err := profile.IPTablesCounters(ctx, ns, profile.SaveBinary(ru.cur.IPTables.Backend))
		if err != nil {
			fmt.Fprintf(log, "iptables counters of %s: %v\n", ns, err)
			continue
		}
		out[ns] = rc
	}
	return out
}

// counterDelta is what each rule matched between two readings of the
// same rules (the later reading as is if the rules changed).
func counterDelta(before, after []profile.RuleCounter) []profile.RuleCounter {
	out := append([]profile.RuleCounter(nil), after...)
	if len(before) != len(after) {
		return out
	}
	for i := range out {
		b := before[i]
		if b.Table != out[i].Table || b.Chain != out[i].Chain || b.Rule != out[i].Rule {
			return append([]profile.RuleCounter(nil), after...)
		}
		out[i].Packets -= min(b.Packets, out[i].Packets)
		out[i].Bytes -= min(b.Bytes, out[i].Bytes)
	}
	return out
}
