package experiment

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// DefaultEnforceTimeout bounds the wait for a cluster to enforce a point's
// policies as the model says.
const DefaultEnforceTimeout = 30 * time.Second

// enforcePort is a port no generated policy allows (fillerPort+2i are
// even): the probe's denied cell when the server is isolated.
const enforcePort = fillerPort + 1

// clusterBackend measures on a cluster (Cluster: package kube's
// Backend): one deployment at a time, its policies checked enforced with
// real connections before anything is measured.
type clusterBackend struct {
	cl             Cluster
	run            string // the run's name (its lab name)
	out            string // the results directory, for the probes' logs
	unenforced     bool
	enforceTimeout time.Duration
	note           func(string)

	cur      *topology.Spec   // the topology deployed, if any
	polSet   bool             // curPol is in force on the cluster
	curPol   string           // policy text applied
	inForce  []*policy.Policy // curPol's policies (nil: none, or unknown)
	inForceN int              // and their Params.Policies
	// inForceKnown: inForce is what the cluster holds (false after an
	// apply that failed: the next one is judged but not timed).
	inForceKnown bool
	svcSet       bool       // curSvc is installed on the cluster
	curSvc       string     // Service text installed
	curVIP       netip.Addr // the measured Service's cluster IP, if any
	built        bool       // something was deployed (Teardown has work)
}

func (c *clusterBackend) name() string { return results.BackendKubernetes }

func (c *clusterBackend) describe(ctx context.Context) (*results.ClusterInfo, error) {
	return c.cl.Describe(ctx)
}

// up makes the point's endpoints the ones deployed on the cluster: a new
// Deploy replaces the previous one.
func (c *clusterBackend) up(ctx context.Context, spec *topology.Spec, p results.Params, _, b *results.Build) error {
	c.note(fmt.Sprintf("deploying %s on the cluster: %s", c.run, describeDeployment(p)))
	t0 := time.Now()
	c.built = true
	err := c.cl.Deploy(ctx, spec, p.Placement, p.Network == results.NetworkHost, c.note)
	b.UpSeconds = time.Since(t0).Seconds()
	if err != nil {
		b.Error = err.Error()
		c.cur = nil
		return fmt.Errorf("deploy (%s): %w", describeDeployment(p), err)
	}
	b.Namespaces = c.cl.Namespaces()
	b.Nodes = map[string]string{}
	for _, ep := range spec.Endpoints {
		if _, node, ok := c.cl.Endpoint(ep.ID()); ok {
			b.Nodes[ep.ID()] = node
		}
	}
	// Deploy deleted the run's policies: none is in force.
	c.cur, c.curPol, c.polSet = spec, "", false
	c.inForce, c.inForceN, c.inForceKnown = nil, 0, true
	c.curSvc, c.svcSet, c.curVIP = "", false, netip.Addr{}
	return nil
}

func describeDeployment(p results.Params) string {
	parts := []string{p.Topology}
	if p.Placement != "" {
		parts = append(parts, p.Placement)
	}
	if p.Network != "" {
		parts = append(parts, p.Network+" network")
	}
	return strings.Join(parts, ", ")
}

// policies applies the point's policies on the cluster and checks, with
// real connections from the client to the server, that the cluster
// enforces them as cnlab's model says before anything is measured; the
// time from the apply to that is recorded. A cluster that does not (a CNI
// without NetworkPolicy) fails the point, unless the run measures anyway
// (Options.Unenforced): the mismatch is then recorded.
// observe: the kubernetes backend refuses the observe key (a cluster's
// flow visibility is its CNI's).
func (c *clusterBackend) observe(context.Context, results.Params, *results.Build) error { return nil }

func (c *clusterBackend) policies(ctx context.Context, p results.Params, b *results.Build, bi int) error {
	text := policyText(p)
	if c.polSet && text == c.curPol {
		return nil
	}
	pols, err := parseGenerated(text)
	if err != nil {
		return err
	}
	a := results.Apply{Policies: p.Policies, PolicyMode: p.PolicyMode}
	recordCluster(&a, p)
	cells, err := c.probeCells(pols, p.Policies)
	if err != nil {
		return err
	}
	var ports []int
	for _, cell := range cells {
		ports = append(ports, cell.port)
		if cell.changes {
			a.ChangedCells++
		}
	}
	// The probe's server runs before the apply begins, so that the time
	// to enforcement is the cluster's, not the exec that starts it.
	pb, err := c.startProbe(ctx, fmt.Sprintf("enforce-b%d-a%d", bi, len(b.PolicyApply)), ports)
	if err != nil {
		return err
	}
	defer pb.close()
	t0 := time.Now()
	err = c.cl.ApplyPolicies(ctx, text)
	a.Seconds = time.Since(t0).Seconds()
	if err == nil {
		err = c.checkEnforced(ctx, cells, t0, pb, &a)
	}
	if err != nil {
		a.Error = err.Error()
		// What is in force now is unknown (the apply may have gone
		// through, or part of it): the next apply is judged, not timed.
		c.curPol, c.polSet, c.inForce, c.inForceN, c.inForceKnown = policyUnknown, false, nil, 0, false
	} else {
		c.curPol, c.polSet, c.inForce, c.inForceN, c.inForceKnown = text, true, pols, p.Policies, true
	}
	b.PolicyApply = append(b.PolicyApply, a)
	if err != nil {
		return fmt.Errorf("%s: %w", policiesLabel(p), err)
	}
	return nil
}

// probeCell is one connection the enforcement probe makes, from the
// client to the server on a TCP port: whether the new policies allow it,
// and whether the apply changes that (the policies in force before say
// the opposite).
type probeCell struct {
	port    int
	allowed bool
	changes bool
}

// probeCells chooses the enforcement probe's connections: the rr port and
// a port no generated policy allows, and up to two ports of generated
// policies whose verdict the apply changes (of the n new policies and the
// ones in force, the last one's port and the first beyond): only such a
// connection tells the new policies from the old ones, so a sweep from N
// to M policies is timed, not passed at once on the old set.
func (c *clusterBackend) probeCells(pols []*policy.Policy, n int) ([]probeCell, error) {
	cl, err := c.cur.Endpoint(topology.DefaultNamespace + "/client")
	if err != nil {
		return nil, err
	}
	sv, err := c.cur.Endpoint(topology.DefaultNamespace + "/server")
	if err != nil {
		return nil, err
	}
	before, err := policy.NewModel(c.cur, c.inForce)
	if err != nil {
		return nil, err
	}
	after, err := policy.NewModel(c.cur, pols)
	if err != nil {
		return nil, err
	}
	cell := func(port int) probeCell {
		was, is := before.Verdict(cl, sv, "tcp", port).Allowed, after.Verdict(cl, sv, "tcp", port).Allowed
		return probeCell{port: port, allowed: is, changes: was != is && c.inForceKnown}
	}
	cells := []probeCell{cell(RRPort), cell(enforcePort)}
	seen := map[int]bool{RRPort: true, enforcePort: true}
	var candidates []int
	for _, k := range []int{c.inForceN, n} {
		candidates = append(candidates, fillerPort+2*max(k-1, 0), fillerPort+2*k)
	}
	// The cluster policies' ports are chosen among apart, so that a
	// change of NetworkPolicies does not crowd them out.
	for _, group := range [][]int{candidates, append(clusterProbePorts(pols), clusterProbePorts(c.inForce)...)} {
		added := 0
		for _, port := range group {
			if seen[port] || port <= 0 || port > 65535 || added == 2 || !c.inForceKnown {
				continue
			}
			seen[port] = true
			if pc := cell(port); pc.changes {
				cells = append(cells, pc)
				added++
			}
		}
	}
	return cells, nil
}

// clusterProbePorts are the TCP ports, one by one, that the rules of a
// set's cluster policies name: the last Admin-tier policy's (the highest
// priority number: when it is enforced the tier is) first, then every
// Baseline-tier policy's. A probe of one whose verdict the apply changes
// tells a cluster that enforces the tiers from one whose CNI ignores them
// (accepting their CRDs does not enforce them).
func clusterProbePorts(pols []*policy.Policy) []int {
	var last *policy.Policy
	var baseline []*policy.Policy
	for _, p := range pols {
		switch p.Tier {
		case policy.TierAdmin:
			if last == nil || p.Priority >= last.Priority {
				last = p
			}
		case policy.TierBaseline:
			baseline = append(baseline, p)
		}
	}
	var ports []int
	for _, p := range append([]*policy.Policy{last}, baseline...) {
		if p == nil {
			continue
		}
		for _, s := range p.Specs {
			for _, r := range append(slices.Clone(s.Ingress.Ordered), s.Egress.Ordered...) {
				for _, pt := range r.Ports {
					if pt.Protocol == policy.TCP && pt.Name == "" && pt.Port > 0 && pt.EndPort == 0 {
						ports = append(ports, pt.Port)
					}
				}
			}
		}
	}
	return ports
}

// errNotEnforced marks a cluster that does not do what the policies say.
var errNotEnforced = errors.New("the cluster does not enforce the policies as they say")

// checkEnforced probes the cells from the client to the server until what
// connects is what the new policies allow, or the enforce timeout. A
// round in which a probe could not run (an exec that failed) decides
// nothing.
func (c *clusterBackend) checkEnforced(ctx context.Context, cells []probeCell, t0 time.Time, pb *probe, a *results.Apply) error {
	logf := pb.log
	cl, sv := topology.DefaultNamespace+"/client", topology.DefaultNamespace+"/server"
	svIP, _, _ := c.cl.Endpoint(sv)
	timeout := c.timeout()
	deadline := t0.Add(timeout)
	var last string
	for {
		// The cells of a round are probed at once: a round takes one
		// connect timeout however many cells are denied.
		type result struct {
			got bool
			err error
		}
		results := make([]result, len(cells))
		var wg sync.WaitGroup
		var logMu sync.Mutex
		for i, cell := range cells {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var buf strings.Builder
				got, err := pb.connects(ctx, netip.AddrPortFrom(svIP, uint16(cell.port)), &buf)
				results[i] = result{got, err}
				logMu.Lock()
				io.WriteString(logf, buf.String())
				logMu.Unlock()
			}()
		}
		wg.Wait()
		var wrong []string
		var probeErr error
		for i, cell := range cells {
			got, err := results[i].got, results[i].err
			if err != nil {
				probeErr = err
				break
			}
			if got != cell.allowed {
				wrong = append(wrong, fmt.Sprintf("%s -> %s port %d/tcp %s, the policies %s it", cl, sv, cell.port,
					map[bool]string{true: "connects", false: "does not connect"}[got], map[bool]string{true: "allow", false: "deny"}[cell.allowed]))
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case probeErr != nil:
			last = "the probe could not run: " + probeErr.Error()
		case len(wrong) == 0:
			yes := true
			a.Enforced = &yes
			if a.ChangedCells > 0 {
				a.EnforcedSeconds = time.Since(t0).Seconds()
			}
			fmt.Fprintf(logf, "enforced as the model says after %.3f s (%d of %d cells changed by the apply)\n", time.Since(t0).Seconds(), a.ChangedCells, len(cells))
			return nil
		default:
			last = strings.Join(wrong, "; ")
		}
		if time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	if probeErr := strings.HasPrefix(last, "the probe could not run"); probeErr {
		return fmt.Errorf("enforcement probe: %s", last)
	}
	no := false
	a.Enforced, a.Mismatch = &no, last
	fmt.Fprintf(logf, "not enforced after %v: %s\n", timeout, last)
	if c.unenforced {
		c.note(fmt.Sprintf("warning: %v after %v (%s); measuring anyway (--unenforced)", errNotEnforced, timeout, last))
		return nil
	}
	return fmt.Errorf("%w after %v: %s (does the CNI enforce NetworkPolicy? --unenforced measures anyway)", errNotEnforced, timeout, last)
}

func (c *clusterBackend) timeout() time.Duration {
	if c.enforceTimeout > 0 {
		return c.enforceTimeout
	}
	return DefaultEnforceTimeout
}

// probe is the enforcement probe's server on the server endpoint (cnlab
// agent serve, greeting every connection with a token of its own, so that
// a connection some middlebox accepts is not taken for one to the server)
// and its log.
type probe struct {
	c     *clusterBackend
	token string
	log   *os.File
	srv   *proc
}

// startProbe opens logs/NAME.log and starts the probe's server on the
// ports; close stops it and closes the log.
func (c *clusterBackend) startProbe(ctx context.Context, name string, ports []int) (*probe, error) {
	logf, err := openLog(c.out, filepath.Join("logs", name+".log"))
	if err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	pb := &probe{c: c, token: hex.EncodeToString(b[:]), log: logf}
	argv := []string{c.cl.Agent(), "agent", "serve", "--token", pb.token}
	for _, p := range ports {
		argv = append(argv, "--port", strconv.Itoa(p))
	}
	e := sampleEnv{host: podHost{c.cl}, log: logf, listenWait: podListenWait}
	if pb.srv, err = e.start(ctx, topology.DefaultNamespace+"/server", nil, argv...); err != nil {
		logf.Close()
		return nil, err
	}
	for _, port := range ports {
		if err := e.waitListening(ctx, pb.srv, port, false); err != nil {
			pb.close()
			return nil, err
		}
	}
	return pb, nil
}

func (pb *probe) close() {
	pb.srv.stop(pb.log)
	pb.log.Close()
}

// services installs the point's Services on the cluster, replacing the
// previous point's, waits until the measured one answers from the client
// (kube-proxy or its replacement programmed it), records both times, and
// returns where the workloads connect.
func (c *clusterBackend) services(ctx context.Context, p results.Params, b *results.Build, bi int) (netip.Addr, error) {
	server, _, ok := c.cl.Endpoint(topology.DefaultNamespace + "/server")
	if _, _, ok2 := c.cl.Endpoint(topology.DefaultNamespace + "/client"); !ok || !ok2 {
		return netip.Addr{}, errors.New("the deployment has no default/client or default/server")
	}
	text := serviceText(p)
	if c.svcSet && text == c.curSvc {
		return dest(c.curVIP, server), nil
	}
	measured := ""
	if p.Services > 0 {
		measured = topology.DefaultNamespace + "/" + measuredService(p)
	}
	a := results.ServiceApply{Services: p.Services, Backends: p.ServiceBackends}
	var pb *probe
	if p.Services > 0 {
		// The probe's server runs before the apply begins (see policies).
		var err error
		if pb, err = c.startProbe(ctx, fmt.Sprintf("service-b%d-a%d", bi, len(b.ServiceApply)), []int{RRPort}); err != nil {
			return netip.Addr{}, err
		}
		defer pb.close()
	}
	t0 := time.Now()
	vip, err := c.cl.ApplyServices(ctx, text, measured)
	a.Seconds = time.Since(t0).Seconds()
	if err == nil && p.Services > 0 {
		err = c.checkServiceReady(ctx, measured, vip, t0, time.Now(), pb, &a)
	}
	if err != nil {
		a.Error = err.Error()
	}
	b.ServiceApply = append(b.ServiceApply, a)
	if err != nil {
		c.curSvc, c.svcSet = policyUnknown, false
		return netip.Addr{}, fmt.Errorf("install %d Services: %w", p.Services, err)
	}
	c.curSvc, c.svcSet, c.curVIP = text, true, vip
	return dest(vip, server), nil
}

// checkServiceReady connects from the client to the measured Service's
// cluster IP on the rr port until the connection is accepted: ReadySeconds
// counts from the apply's start (t0), the timeout from its end (applied),
// so that a long apply (thousands of Services) is not taken for a Service
// that does not answer.
func (c *clusterBackend) checkServiceReady(ctx context.Context, name string, vip netip.Addr, t0, applied time.Time, pb *probe, a *results.ServiceApply) error {
	logf := pb.log
	timeout := c.timeout()
	for {
		ok, err := pb.connects(ctx, netip.AddrPortFrom(vip, RRPort), logf)
		if ok {
			a.ReadySeconds = time.Since(t0).Seconds()
			return nil
		}
		if err != nil {
			fmt.Fprintf(logf, "probe error (retried): %v\n", err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(applied) > timeout {
			return fmt.Errorf("Service %s (cluster IP %s) does not answer on port %d after %v: does the cluster run kube-proxy or a replacement, and did the server get an EndpointSlice? (--enforce-timeout waits longer)", name, vip, RRPort, timeout)
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// connects reports whether a TCP connection from the client to dst
// reaches the probe's server (greeted with its token) within a second
// (cnlab agent connect, run there: exit 0, or ExitNoConnection when it
// does not); any other failure (the exec, the relay) is an error, not a
// verdict.
func (pb *probe) connects(ctx context.Context, dst netip.AddrPort, log io.Writer) (bool, error) {
	from := topology.DefaultNamespace + "/client"
	var out syncBuffer
	err := pb.c.cl.Exec(ctx, from, []string{pb.c.cl.Agent(), "agent", "connect", "--to", dst.String(), "--expect", pb.token, "--timeout", "1s"}, &out, &out)
	fmt.Fprintf(log, "$ [%s] connect %s: %v %s\n", from, dst, exitText(err), strings.TrimSpace(out.String()))
	switch code, ok := exitCode(err); {
	case err == nil:
		return true, nil
	case ok && code == ExitNoConnection:
		return false, nil
	}
	return false, fmt.Errorf("connect from %s to %s: %v: %s", from, dst, exitText(err), lastLine(out.String()))
}

// ExitNoConnection is cnlab agent connect's exit status when the
// connection was not made (or not to the probe's server).
const ExitNoConnection = 3

func exitText(err error) string {
	if err == nil {
		return "ok"
	}
	if code, ok := exitCode(err); ok {
		return "exit " + strconv.Itoa(code)
	}
	return err.Error()
}

// exitCode is the exit status of a command that exited non-zero (here or
// in a pod).
func exitCode(err error) (int, bool) {
	var xe interface{ ExitCode() int }
	if errors.As(err, &xe) {
		return xe.ExitCode(), true
	}
	return 0, false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// sample runs the workloads in the client's and server's pods, with the
// pods' own cnlab.
func (c *clusterBackend) sample(pr *results.PointResult, dest netip.Addr) (sampleEnv, error) {
	cl, sv := topology.DefaultNamespace+"/client", topology.DefaultNamespace+"/server"
	_, clNode, ok := c.cl.Endpoint(cl)
	svIP, svNode, ok2 := c.cl.Endpoint(sv)
	if !ok || !ok2 {
		return sampleEnv{}, errors.New("the deployment has no default/client or default/server")
	}
	pr.Nodes = map[string]string{"client": clNode, "server": svNode}
	agent := []string{c.cl.Agent()}
	return sampleEnv{ep: endpoints{client: cl, server: sv, serverIP: svIP, dest: dest}, rr: append(agent, "rr"), cnlab: agent, lab: c.run,
		host: podHost{c.cl}, listenWait: podListenWait, nodeCPU: true, splitNodes: clNode != svNode}, nil
}

// down deletes what the run created on the cluster, with a context of
// its own: it runs after Ctrl-C too.
func (c *clusterBackend) down(b *results.Build) error {
	if !c.built {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	err := c.cl.Teardown(ctx)
	if b != nil {
		b.TeardownSecs = time.Since(t0).Seconds()
		if err != nil {
			b.Error = "teardown: " + err.Error()
		}
	}
	c.cur, c.built = nil, false
	if err != nil {
		return fmt.Errorf("%w: delete what run %s created on the cluster: %w (remove it with: cnlab down --backend kubernetes %s)", errTeardown, c.run, err, c.run)
	}
	return nil
}

// podListenWait bounds the wait for a server in a pod to listen: an exec
// per look.
const podListenWait = 20 * time.Second

// podGrace is how long a command in a pod has to stop: the backend stops
// it there by another exec.
const podGrace = 15 * time.Second

// podHost runs processes in a cluster's endpoints (by ID), in this
// process through the cluster's exec stream.
type podHost struct{ cl Cluster }

func (h podHost) start(ctx context.Context, where string, argv []string, stdout, stderr io.Writer) (process, error) {
	if _, _, ok := h.cl.Endpoint(where); !ok {
		return nil, fmt.Errorf("endpoint %s has no pod (nothing deployed)", where)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &podProc{h: h, where: where, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go func() {
		p.err = h.cl.Exec(ctx, where, argv, stdout, stderr)
		close(p.done)
	}()
	return p, nil
}

func (h podHost) procStat(ctx context.Context, where string) ([]byte, error) {
	return h.output(ctx, where, "cat", "/proc/stat")
}

// output runs argv in where and returns its stdout.
func (h podHost) output(ctx context.Context, where string, argv ...string) ([]byte, error) {
	var out bytes.Buffer
	err := h.cl.Exec(ctx, where, argv, &out, nil)
	return out.Bytes(), err
}

// podProc is a command running in a pod.
type podProc struct {
	h      podHost
	where  string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (p *podProc) wait() error {
	select {
	case <-p.done:
		return p.err
	case <-p.ctx.Done():
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(podGrace):
		return fmt.Errorf("not stopped in %s after %v: %w", p.where, podGrace, p.ctx.Err())
	}
}

func (p *podProc) stop() {
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(podGrace):
	}
}

func (p *podProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// cpuTime: what it used is not measured from here.
func (p *podProc) cpuTime() (time.Duration, bool) { return 0, false }

// socketTable reads the endpoint's table (/proc/net is the pod's network
// namespace), by an exec.
func (p *podProc) socketTable(ctx context.Context, table string) ([]byte, error) {
	return p.h.output(ctx, p.where, "cat", "/proc/net/"+table)
}
