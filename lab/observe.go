package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/daemon"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// The recorder: one process per lab whose observe level is not off,
// started by up (or SetObserve) in the lab's first host's namespace, so
// that down kills it with every process of the lab's namespaces. It reads
// every source of the lab's datapath (eBPF's ring buffers, the netfilter
// log groups and conntrack events of every host, the L7 proxies' access
// logs), names the flows (observe.Namer) and appends them to the lab's
// store (observe.Dir), where `cnlab observe` reads them. It follows the
// lab's ledger: a new observe level or policy set is picked up within a
// second.

// envRecord, when set to a lab's name, makes MaybeRecord run the
// recorder in place of the program (cnlab starts it by running its own
// executable again, daemon.MaybeRun).
const envRecord = "CNLAB_RECORD_LAB"

const (
	recorderPid   = "recorder.pid"
	recorderReady = "recorder.ready"
	recorderLog   = "recorder.log"
)

func init() { daemon.Register(envRecord, recordMain) }

// recordMain runs a lab's recorder and exits (daemon.MaybeRun).
func recordMain(name string) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := record(ctx, name)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cnlab recorder:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// RecorderRunning reports whether a lab's recorder runs (its pid file
// names a live process that is ready).
func RecorderRunning(lab string) bool {
	pid := recorderPidOf(lab)
	if pid <= 0 {
		return false
	}
	if unix.Kill(pid, 0) != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(observe.Dir(lab), recorderReady))
	return err == nil
}

func recorderPidOf(lab string) int {
	b, err := os.ReadFile(filepath.Join(observe.Dir(lab), recorderPid))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// startRecorder starts a lab's recorder unless one runs, and waits until
// it reads every source.
func startRecorder(spec *topology.Spec) error {
	if RecorderRunning(spec.Name) {
		return nil
	}
	if len(spec.Hosts) == 0 {
		return nil
	}
	dir := observe.Dir(spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("recorder: %w", err)
	}
	_ = os.Remove(filepath.Join(dir, recorderReady))
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("recorder: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(dir, recorderLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("recorder: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envRecord+"="+spec.Name)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	_ = unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) // a daemon keeps no inherited descriptor
	if err := netns.Start(spec.Hosts[0].Netns, cmd); err != nil {
		return fmt.Errorf("recorder: start: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(dir, recorderPid), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("recorder: %w", err)
	}
	deadline := time.After(15 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, recorderReady)); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			text, _ := os.ReadFile(filepath.Join(dir, recorderLog))
			return fmt.Errorf("recorder of lab %s exited at start (%v): %s", spec.Name, err, lastLine(string(text)))
		case <-deadline:
			_ = cmd.Process.Kill()
			return fmt.Errorf("recorder of lab %s was not ready within 15s", spec.Name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// markReady says the recorder reads every source at this level.
func markReady(lab, level string) error {
	return os.WriteFile(filepath.Join(observe.Dir(lab), recorderReady), []byte(level+"\n"), 0o644)
}

// recorderLevel is the level the running recorder applies ("" if none).
func recorderLevel(lab string) string {
	b, err := os.ReadFile(filepath.Join(observe.Dir(lab), recorderReady))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// waitRecorder waits until the running recorder applies level.
func waitRecorder(lab, level string) error {
	for i := 0; i < 250; i++ {
		if recorderLevel(lab) == level {
			return nil
		}
		if !RecorderRunning(lab) {
			return fmt.Errorf("the recorder of lab %s stopped (see %s)", lab, filepath.Join(observe.Dir(lab), recorderLog))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the recorder of lab %s did not take observe %s within 5s", lab, level)
}

// stopRecorder stops a lab's recorder, if one runs, and waits for it.
func stopRecorder(lab string) {
	pid := recorderPidOf(lab)
	_ = os.Remove(filepath.Join(observe.Dir(lab), recorderReady))
	if pid <= 0 {
		return
	}
	if unix.Kill(pid, unix.SIGTERM) == nil {
		for i := 0; i < 100 && unix.Kill(pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	_ = os.Remove(filepath.Join(observe.Dir(lab), recorderPid))
}

// SetObserve changes what a running lab records: the datapath's log rules
// (netfilter) are rewritten for the new level with the stored policy, and
// the recorder started or stopped. It returns the level before.
func SetObserve(ctx context.Context, labName, level string) (string, error) {
	if err := topology.CheckObserve(level); err != nil {
		return "", fmt.Errorf("observe level %w", err)
	}
	unlock, err := lockLab(labName)
	if err != nil {
		return "", err
	}
	defer unlock()
	st, err := ReadState(labName)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("no lab %s", labName)
		}
		return "", err
	}
	if st.Phase != PhaseUp || st.Spec == nil {
		return "", fmt.Errorf("lab %s is not up (phase %s)", labName, st.Phase)
	}
	spec := st.Spec
	if spec.Chain != nil || spec.Datapath == kind.None {
		return "", fmt.Errorf("lab %s is a chain: it has no policy datapath to observe", labName)
	}
	before := spec.ObserveLevel()
	if level != before {
		spec.Observe = level
		if level == topology.ObserveOff {
			spec.Observe = ""
		}
		_, dp, err := openDatapath(labName)
		if err != nil {
			return before, err
		}
		pols, err := Policies(labName)
		if err != nil {
			return before, err
		}
		if _, err := applyLocked(ctx, spec, dp, pols); err != nil {
			return before, fmt.Errorf("observe %s: %w", level, err)
		}
		if err := writeState(st); err != nil {
			return before, err
		}
	}
	if level == topology.ObserveOff {
		stopRecorder(labName)
		return before, nil
	}
	if RecorderRunning(labName) {
		return before, waitRecorder(labName, level)
	}
	return before, startRecorder(spec)
}

// recorderConfig is what the recorder follows in the ledger.
type recorderConfig struct {
	level    string
	policies time.Time // the stored policy set's modification time
}

func readRecorderConfig(labName string) (recorderConfig, *topology.Spec, error) {
	st, err := ReadState(labName)
	if err != nil {
		return recorderConfig{}, nil, err
	}
	if st.Spec == nil {
		return recorderConfig{}, nil, fmt.Errorf("lab %s has no spec", labName)
	}
	var pt time.Time
	if fi, err := os.Stat(policiesPath(labName)); err == nil {
		pt = fi.ModTime()
	}
	return recorderConfig{level: st.Spec.ObserveLevel(), policies: pt}, st.Spec, nil
}

// recorder is a running recorder's state.
type recorder struct {
	lab   string
	w     *observe.Writer
	namer atomic.Pointer[observe.Namer]
	comp  atomic.Pointer[policy.Compiled]
	model atomic.Pointer[policy.Model] // what comp was compiled from
	spec  *topology.Spec
	// frontends maps a Service's VIP:port (and a node port) to its name,
	// for conntrack's translations.
	mu        sync.Mutex
	frontends map[netip.AddrPort]string
	polTime   time.Time     // the stored policy set's modification time the namer has
	dropped   atomic.Uint64 // records the writer failed to write
}

// emit names and writes one flow, with the policy stored now: a flow
// that comes right after a policy change is named by the new policy.
func (r *recorder) emit(f *observe.Flow) {
	r.fresh()
	r.namer.Load().Name(f)
	if err := r.w.Write(f); err != nil {
		r.dropped.Add(1)
	}
}

// lost writes a lost-events record.
func (r *recorder) lost(host, source string, n uint64) {
	_ = r.w.Write(&observe.Lost{Lost: n, Time: time.Now().UTC(), Host: host, Source: source})
}

// fresh renames when the stored policy set changed since the namer was
// built (a stat per flow: about a microsecond).
func (r *recorder) fresh() {
	fi, err := os.Stat(policiesPath(r.lab))
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if fi.ModTime().Equal(r.polTime) {
		return
	}
	if r.rename() == nil {
		r.polTime = fi.ModTime()
	}
}

// rename rebuilds the namer from the lab's stored policy.
func (r *recorder) rename() error {
	spec, m, err := Model(r.lab, false)
	if err != nil {
		return err
	}
	c, err := m.Compile()
	if err != nil {
		return err
	}
	r.spec = spec
	r.comp.Store(c)
	r.model.Store(m)
	r.namer.Store(observe.NewNamer(spec, m, c))
	return nil
}

func record(ctx context.Context, labName string) error {
	cfg, spec, err := readRecorderConfig(labName)
	if err != nil {
		return err
	}
	w, err := observe.NewWriter(labName)
	if err != nil {
		return err
	}
	defer w.Close()
	r := &recorder{lab: labName, w: w, spec: spec}
	if err := r.rename(); err != nil {
		return err
	}
	r.polTime = cfg.policies
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	// runIn runs a source until ctx ends; the first error of any ends the
	// recorder. The channel it returns closes once the source reads (or
	// has failed).
	runIn := func(ctx context.Context, group *sync.WaitGroup, name string, fn func(ctx context.Context, ready func()) error) <-chan struct{} {
		ready := make(chan struct{})
		var once sync.Once
		wg.Add(1)
		group.Add(1)
		go func() {
			defer wg.Done()
			defer group.Done()
			err := fn(ctx, func() { once.Do(func() { close(ready) }) })
			once.Do(func() { close(ready) })
			if err != nil && ctx.Err() == nil {
				select { // the first error ends the recorder; the others go
				case errc <- fmt.Errorf("%s: %w", name, err):
				default:
				}
			}
		}()
		return ready
	}
	var life sync.WaitGroup
	run := func(name string, fn func(ctx context.Context, ready func()) error) <-chan struct{} {
		return runIn(ctx, &life, name, fn)
	}
	// The level's sources restart on a change of level: eBPF's lease (its
	// level is the programs'), and conntrack's events for Services, which
	// only all records (with a listener the kernel makes an event of
	// every new connection: no cost drops may have).
	lvlCancel, lvlGroup := func() {}, &sync.WaitGroup{}
	startLevel := func(level string) []<-chan struct{} {
		lvlCancel()
		lvlGroup.Wait() // the monitor before has let go of the ring buffers
		lctx, c := context.WithCancel(ctx)
		lvlCancel, lvlGroup = c, &sync.WaitGroup{}
		var rs []<-chan struct{}
		if spec.Datapath == kind.EBPF {
			rs = append(rs, runIn(lctx, lvlGroup, "ebpf", func(ctx context.Context, ready func()) error { return r.ebpf(ctx, level, ready) }))
		}
		if level == topology.ObserveAll {
			rs = append(rs, r.services(lctx, func(name string, fn func(context.Context, func()) error) <-chan struct{} {
				return runIn(lctx, lvlGroup, name, fn)
			})...)
		}
		return rs
	}
	readies := startLevel(cfg.level)
	if spec.Datapath != kind.EBPF {
		readies = append(readies, r.netfilter(ctx, run)...)
	}
	readies = append(readies, run("l7", r.l7))
	for _, rd := range readies {
		select {
		case <-rd:
		case err := <-errc:
			return err
		case <-ctx.Done():
			return nil
		}
	}
	if err := markReady(labName, cfg.level); err != nil {
		return err
	}
	flush := time.NewTicker(100 * time.Millisecond)
	defer flush.Stop()
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	var result error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-errc:
			result = err
			break loop
		case <-flush.C:
			_ = w.Flush()
			if n := r.dropped.Swap(0); n > 0 {
				r.lost("", "recorder", n)
			}
		case <-poll.C:
			now, _, err := readRecorderConfig(labName)
			if err != nil {
				break loop // the lab is going down
			}
			if now.level == topology.ObserveOff {
				break loop
			}
			if now == cfg {
				continue
			}
			r.fresh()
			if now.level != cfg.level {
				for _, rd := range startLevel(now.level) {
					<-rd
				}
			}
			cfg = now
			if err := markReady(labName, cfg.level); err != nil {
				result = err
				break loop
			}
		}
	}
	cancel()
	wg.Wait()
	return result
}

// ebpf follows the eBPF datapath's verdicts at the given level.
func (r *recorder) ebpf(ctx context.Context, level string, ready func()) error {
	m, c := r.model.Load(), r.comp.Load()
	lvl := ebpf.MonitorDrops
	if level == topology.ObserveAll {
		lvl = ebpf.MonitorFlows // every new flow's verdict, once, and the drops
	}
	o := ebpf.MonitorOptions{Level: lvl, Rules: c.Rules, Pols: m.Policies, Started: ready,
		Lost: func(host string, n uint64) {
			if n > 0 {
				r.lost(host, "ebpf", n)
			}
		}}
	return ebpf.MonitorWith(ctx, m.Lab, o, func(ev ebpf.Event) error {
		if f, ok := ebpfFlow(ev, level); ok {
			r.emit(f)
		}
		return nil
	})
}

// ebpfFlow turns an eBPF verdict into a flow; ok is false for verdicts
// observe does not record at this level (packets of established flows).
func ebpfFlow(ev ebpf.Event, level string) (*observe.Flow, bool) {
	f := &observe.Flow{Time: ev.Time.UTC(), Host: ev.Host, Direction: ev.Direction, Endpoint: ev.Endpoint,
		Hook: ev.At, Origin: ev.Origin, Datapath: string(kind.EBPF), TCPFlags: observe.TCPFlagNames(ev.TCPFlags)}
	f.SetAddrs(ev.Src, ev.Dst, 0)
	f.Protocol = ev.Protocol
	f.Reason = ev.Reason
	switch ev.Reason {
	case "policy-deny", "policy-default-deny":
		f.Reason = observe.ReasonPolicyDenied
	case "policy-allow":
		f.Reason = observe.ReasonPolicyAllowed
	case "established", "related", "fragment", "arp-replied", "arp-passed", "from-l7-proxy":
		return nil, false // not a new flow's verdict
	}
	switch {
	case ev.Verdict == "dropped":
		f.Verdict, f.Type = observe.Dropped, observe.TypeDrop
	case ev.Reason == observe.ReasonToProxy:
		f.Verdict, f.Type = observe.Redirected, observe.TypeTrace
	default:
		if level != topology.ObserveAll {
			return nil, false
		}
		f.Verdict, f.Type = observe.Forwarded, observe.TypeTrace
	}
	return f, true
}

// l7 follows the L7 proxies' access logs.
func (r *recorder) l7(ctx context.Context, ready func()) error {
	var hosts []string
	for _, h := range r.spec.Hosts {
		hosts = append(hosts, h.Name)
	}
	ready()
	return l7proxy.Follow(ctx, r.lab, hosts, func(host string, le l7proxy.LogEntry) error {
		src, err1 := netip.ParseAddrPort(le.Src)
		dst, err2 := netip.ParseAddrPort(le.Dst)
		if err1 != nil || err2 != nil {
			return nil
		}
		f := &observe.Flow{Time: le.Time.UTC(), Host: host, Type: observe.TypeL7, Hook: "l7-proxy", Direction: "ingress",
			HTTP: &observe.HTTP{Method: le.Method, Path: le.Path, Host: le.Host, Status: le.Status, Micros: le.Micros}}
		f.SetAddrs(src, dst, 6)
		switch le.Verdict {
		case "allowed":
			f.Verdict, f.Reason = observe.Forwarded, observe.ReasonL7Allowed
		case "denied":
			f.Verdict, f.Reason = observe.Dropped, observe.ReasonL7Denied
		default:
			f.Verdict, f.Reason = observe.Forwarded, le.Verdict
		}
		if c := r.comp.Load(); c != nil {
			f.Origin = l7Origin(c, dst)
		}
		r.emit(f)
		return nil
	})
}

// l7Origin is the origin of the L7 rules that judge requests to dst: the
// policy whose http rules hold for the destination's identity and port.
func l7Origin(c *policy.Compiled, dst netip.AddrPort) string {
	id := c.IdentityOfIP(dst.Addr())
	for _, h := range c.HTTP {
		if h.Subject == id && h.Port == dst.Port() {
			return h.Origin
		}
	}
	return ""
}
