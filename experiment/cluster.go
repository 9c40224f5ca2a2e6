package experiment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// DefaultEnforceTimeout bounds the wait for a cluster to enforce a point's
// policies as the model says.
const DefaultEnforceTimeout = 30 * time.Second

// enforcePort is a port no generated policy allows (fillerPort+2i are
// even): the probe's denied cell when the server is isolated.
const enforcePort = fillerPort + 1

// ensureDeployment makes the point's endpoints the ones deployed on the
// backend: a new Deploy when the topology, placement or network change.
func (ru *runner) ensureDeployment(ctx context.Context, p Params) error {
	key := labKey(p)
	if ru.cur != nil && ru.curKey == key {
		return nil
	}
	spec, err := ru.s.labSpec(p, ru.o.LabName)
	if err != nil {
		return err
	}
	b := Build{Key: key, Params: p, At: time.Now().UTC()}
	b.Params.Flows, b.Params.Size, b.Params.Zerocopy = 0, 0, false
	ru.prog.note(fmt.Sprintf("deploying %s on the cluster: %s", ru.o.LabName, describeDeployment(p)))
	t0 := time.Now()
	dep, err := ru.o.Backend.Deploy(ctx, spec, p, ru.prog.note)
	b.UpSeconds = time.Since(t0).Seconds()
	if err != nil {
		b.Error = err.Error()
		ru.r.Builds = append(ru.r.Builds, b)
		ru.cur, ru.curKey, ru.dep = nil, "", nil
		return fmt.Errorf("deploy (%s): %w", describeDeployment(p), err)
	}
	b.Namespaces = dep.Namespaces
	b.Nodes = map[string]string{}
	for id, ep := range dep.Endpoints {
		b.Nodes[id] = ep.Node
	}
	ru.r.Builds = append(ru.r.Builds, b)
	// Deploy deleted the run's policies: none is in force.
	ru.cur, ru.curKey, ru.curBuild, ru.curPol, ru.polSet, ru.dep = spec, key, len(ru.r.Builds)-1, "", false, dep
	ru.inForce, ru.inForceN, ru.inForceKnown = nil, 0, true
	ru.curSvc, ru.svcSet, ru.curVIP = "", false, netip.Addr{}
	return nil
}

func describeDeployment(p Params) string {
	parts := []string{p.Topology}
	if p.Placement != "" {
		parts = append(parts, p.Placement)
	}
	if p.Network != "" {
		parts = append(parts, p.Network+" network")
	}
	return strings.Join(parts, ", ")
}

// ensureClusterPolicies applies the point's policies on the cluster and
// checks, with real connections from the client to the server, that the
// cluster enforces them as cnlab's model says before anything is
// measured; the time from the apply to that is recorded. A cluster that
// does not (a CNI without NetworkPolicy) fails the point, unless the run
// measures anyway (Options.Unenforced): the mismatch is then recorded.
func (ru *runner) ensureClusterPolicies(ctx context.Context, p Params) error {
	text := policyText(p)
	if ru.polSet && text == ru.curPol {
		return nil
	}
	pols, err := parseGenerated(text)
	if err != nil {
		return err
	}
	a := Apply{Policies: p.Policies, PolicyMode: p.PolicyMode}
	b := &ru.r.Builds[ru.curBuild]
	cells, err := ru.probeCells(pols, p.Policies)
	if err != nil {
		return err
	}
	var ports []int
	for _, c := range cells {
		ports = append(ports, c.port)
		if c.changes {
			a.ChangedCells++
		}
	}
	// The probe's server runs before the apply begins, so that the time
	// to enforcement is the cluster's, not the exec that starts it.
	pb, err := ru.startProbe(ctx, fmt.Sprintf("enforce-b%d-a%d", ru.curBuild, len(b.PolicyApply)), ports)
	if err != nil {
		return err
	}
	defer pb.close()
	t0 := time.Now()
	err = ru.o.Backend.ApplyPolicies(ctx, text)
	a.Seconds = time.Since(t0).Seconds()
	if err == nil {
		err = ru.checkEnforced(ctx, cells, t0, pb, &a)
	}
	if err != nil {
		a.Error = err.Error()
		// What is in force now is unknown (the apply may have gone
		// through, or part of it): the next apply is judged, not timed.
		ru.curPol, ru.polSet, ru.inForce, ru.inForceN, ru.inForceKnown = policyUnknown, false, nil, 0, false
	} else {
		ru.curPol, ru.polSet, ru.inForce, ru.inForceN, ru.inForceKnown = text, true, pols, p.Policies, true
	}
	b.PolicyApply = append(b.PolicyApply, a)
	if err != nil {
		return fmt.Errorf("%d %s policies: %w", p.Policies, p.PolicyMode, err)
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
func (ru *runner) probeCells(pols []*policy.Policy, n int) ([]probeCell, error) {
	cl, err := ru.cur.Endpoint(topology.DefaultNamespace + "/client")
	if err != nil {
		return nil, err
	}
	sv, err := ru.cur.Endpoint(topology.DefaultNamespace + "/server")
	if err != nil {
		return nil, err
	}
	before, err := policy.NewModel(ru.cur, ru.inForce)
	if err != nil {
		return nil, err
	}
	after, err := policy.NewModel(ru.cur, pols)
	if err != nil {
		return nil, err
	}
	cell := func(port int) probeCell {
		was, is := before.Verdict(cl, sv, "tcp", port).Allowed, after.Verdict(cl, sv, "tcp", port).Allowed
		return probeCell{port: port, allowed: is, changes: was != is && ru.inForceKnown}
	}
	cells := []probeCell{cell(RRPort), cell(enforcePort)}
	seen := map[int]bool{RRPort: true, enforcePort: true}
	var candidates []int
	for _, k := range []int{ru.inForceN, n} {
		candidates = append(candidates, fillerPort+2*max(k-1, 0), fillerPort+2*k)
	}
	added := 0
	for _, port := range candidates {
		if seen[port] || port > 65535 || added == 2 || !ru.inForceKnown {
			continue
		}
		seen[port] = true
		if c := cell(port); c.changes {
			cells = append(cells, c)
			added++
		}
	}
	return cells, nil
}

// errNotEnforced marks a cluster that does not do what the policies say.
var errNotEnforced = errors.New("the cluster does not enforce the policies as they say")

// checkEnforced probes the cells from the client to the server until what
// connects is what the new policies allow, or the enforce timeout. A
// round in which a probe could not run (an exec that failed) decides
// nothing.
func (ru *runner) checkEnforced(ctx context.Context, cells []probeCell, t0 time.Time, pb *probe, a *Apply) error {
	logf := pb.log
	cl, sv := topology.DefaultNamespace+"/client", topology.DefaultNamespace+"/server"
	svIP := ru.dep.Endpoints[sv].IP
	timeout := ru.enforceTimeout()
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
		for i, c := range cells {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var buf strings.Builder
				got, err := pb.connects(ctx, netip.AddrPortFrom(svIP, uint16(c.port)), &buf)
				results[i] = result{got, err}
				logMu.Lock()
				io.WriteString(logf, buf.String())
				logMu.Unlock()
			}()
		}
		wg.Wait()
		var wrong []string
		var probeErr error
		for i, c := range cells {
			got, err := results[i].got, results[i].err
			if err != nil {
				probeErr = err
				break
			}
			if got != c.allowed {
				wrong = append(wrong, fmt.Sprintf("%s -> %s port %d/tcp %s, the policies %s it", cl, sv, c.port,
					map[bool]string{true: "connects", false: "does not connect"}[got], map[bool]string{true: "allow", false: "deny"}[c.allowed]))
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
	if ru.o.Unenforced {
		ru.prog.note(fmt.Sprintf("warning: %v after %v (%s); measuring anyway (--unenforced)", errNotEnforced, timeout, last))
		return nil
	}
	return fmt.Errorf("%w after %v: %s (does the CNI enforce NetworkPolicy? --unenforced measures anyway)", errNotEnforced, timeout, last)
}

func (ru *runner) enforceTimeout() time.Duration {
	if ru.o.EnforceTimeout > 0 {
		return ru.o.EnforceTimeout
	}
	return DefaultEnforceTimeout
}

// probe is the enforcement probe's server on the server endpoint (cnlab
// agent serve, greeting every connection with a token of its own, so that
// a connection some middlebox accepts is not taken for one to the server)
// and its log.
type probe struct {
	ru    *runner
	token string
	log   *os.File
	srv   *proc
}

// startProbe opens logs/NAME.log and starts the probe's server on the
// ports; close stops it and closes the log.
func (ru *runner) startProbe(ctx context.Context, name string, ports []int) (*probe, error) {
	logf, err := openLog(ru.o.Out, filepath.Join("logs", name+".log"))
	if err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	pb := &probe{ru: ru, token: hex.EncodeToString(b[:]), log: logf}
	argv := []string{ru.dep.Agent, "agent", "serve", "--token", pb.token}
	for _, p := range ports {
		argv = append(argv, "--port", strconv.Itoa(p))
	}
	e := sampleEnv{be: ru.o.Backend, log: logf}
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

// ensureClusterServices installs the point's Services on the cluster,
// replacing the previous point's, waits until the measured one answers
// from the client (kube-proxy or its replacement programmed it), records
// both times, and returns where the workloads connect.
func (ru *runner) ensureClusterServices(ctx context.Context, p Params, server netip.Addr) (netip.Addr, error) {
	text := serviceText(p)
	if ru.svcSet && text == ru.curSvc {
		return ru.curDest(server), nil
	}
	measured := ""
	if p.Services > 0 {
		measured = topology.DefaultNamespace + "/" + measuredService(p)
	}
	a := ServiceApply{Services: p.Services, Backends: p.ServiceBackends}
	b := &ru.r.Builds[ru.curBuild]
	var pb *probe
	if p.Services > 0 {
		// The probe's server runs before the apply begins (see
		// ensureClusterPolicies).
		var err error
		if pb, err = ru.startProbe(ctx, fmt.Sprintf("service-b%d-a%d", ru.curBuild, len(b.ServiceApply)), []int{RRPort}); err != nil {
			return netip.Addr{}, err
		}
		defer pb.close()
	}
	t0 := time.Now()
	vip, err := ru.o.Backend.ApplyServices(ctx, text, measured)
	a.Seconds = time.Since(t0).Seconds()
	if err == nil && p.Services > 0 {
		err = ru.checkServiceReady(ctx, measured, vip, t0, pb, &a)
	}
	if err != nil {
		a.Error = err.Error()
	}
	b.ServiceApply = append(b.ServiceApply, a)
	if err != nil {
		ru.curSvc, ru.svcSet = policyUnknown, false
		return netip.Addr{}, fmt.Errorf("install %d Services: %w", p.Services, err)
	}
	ru.curSvc, ru.svcSet, ru.curVIP = text, true, vip
	return ru.curDest(server), nil
}

// checkServiceReady connects from the client to the measured Service's
// cluster IP on the rr port until the connection is accepted.
func (ru *runner) checkServiceReady(ctx context.Context, name string, vip netip.Addr, t0 time.Time, pb *probe, a *ServiceApply) error {
	logf := pb.log
	timeout := ru.enforceTimeout()
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
		if time.Since(t0) > timeout {
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
	cmd := pb.ru.o.Backend.Command(ctx, from, []string{pb.ru.dep.Agent, "agent", "connect", "--to", dst.String(), "--expect", pb.token, "--timeout", "1s"})
	out, err := cmd.CombinedOutput()
	fmt.Fprintf(log, "$ [%s] connect %s: %v %s\n", from, dst, exitText(err), strings.TrimSpace(string(out)))
	var xe *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &xe) && xe.ExitCode() == ExitNoConnection:
		return false, nil
	}
	return false, fmt.Errorf("connect from %s to %s: %v: %s", from, dst, exitText(err), lastLine(string(out)))
}

// ExitNoConnection is cnlab agent connect's exit status when the
// connection was not made (or not to the probe's server).
const ExitNoConnection = 3

func exitText(err error) string {
	var xe *exec.ExitError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &xe):
		return "exit " + strconv.Itoa(xe.ExitCode())
	}
	return err.Error()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// clusterJob runs one repetition of a point on the backend.
func (ru *runner) clusterJob(ctx context.Context, pr *PointResult, j Job) error {
	if err := ru.ensureDeployment(ctx, pr.Params); err != nil {
		return labError{err}
	}
	if err := ru.ensureClusterPolicies(ctx, pr.Params); err != nil {
		return err
	}
	cl, ok := ru.dep.Endpoints[topology.DefaultNamespace+"/client"]
	sv, ok2 := ru.dep.Endpoints[topology.DefaultNamespace+"/server"]
	if !ok || !ok2 {
		return errors.New("the deployment has no default/client or default/server")
	}
	dest, err := ru.ensureClusterServices(ctx, pr.Params, sv.IP)
	if err != nil {
		return err
	}
	pr.Nodes = map[string]string{"client": cl.Node, "server": sv.Node}
	agent := []string{ru.dep.Agent}
	e := sampleEnv{ep: endpoints{client: topology.DefaultNamespace + "/client", server: topology.DefaultNamespace + "/server", serverIP: sv.IP, dest: dest},
		warmup: time.Duration(ru.s.Warmup), duration: time.Duration(ru.s.Duration), rr: append(agent, "rr"), cnlab: agent, lab: ru.o.LabName, be: ru.o.Backend,
		splitNodes: cl.Node != sv.Node}
	return ru.measure(ctx, pr, j, e)
}

// teardownCluster deletes what the run created on the backend, with a
// context of its own: it runs after Ctrl-C too.
func (ru *runner) teardownCluster() error {
	if ru.cur == nil && ru.dep == nil && len(ru.r.Builds) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	err := ru.o.Backend.Teardown(ctx)
	if len(ru.r.Builds) > 0 {
		b := &ru.r.Builds[len(ru.r.Builds)-1]
		b.TeardownSecs = time.Since(t0).Seconds()
		if err != nil {
			b.Error = "teardown: " + err.Error()
		}
	}
	ru.cur, ru.curKey, ru.dep = nil, "", nil
	if err != nil {
		return fmt.Errorf("%w: delete what run %s created on the cluster: %w (remove it with: cnlab down --backend kubernetes %s)", errTeardown, ru.o.LabName, err, ru.o.LabName)
	}
	return nil
}
