package ebpf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// Monitor levels: which verdicts the programs report (enum monitor_level
// of bpf/cnlab.c).
const (
	MonitorDrops = uint32(cnlabMonitorLevelMONITOR_DROPS)
	MonitorAll   = uint32(cnlabMonitorLevelMONITOR_ALL)
	// MonitorFlows (observe: all) reports drops (rate-limited as with
	// MonitorAll: one a second per flow and reason) and the verdict of
	// every new flow's first packet (policy-allow, not-isolated,
	// to-l7-proxy), each once and not rate-limited; no established,
	// related or fragment packet.
	MonitorFlows = uint32(cnlabMonitorLevelMONITOR_FLOWS)
)

// MonitorOptions are what MonitorWith reports and how.
type MonitorOptions struct {
	Level uint32         // MonitorDrops, MonitorAll or MonitorFlows
	Rules []policy.Entry // the lab's compiled rules, to name the rule behind a verdict (nil: none)
	// Pols, if given, are the lab's policies: a cluster policy's rule is
	// then named with its tier and priority (Policy.TierRef) and its
	// action, as traces name it.
	Pols []*policy.Policy
	// Started, if not nil, is called once the monitor is reporting.
	Started func()
	// Lost, if not nil, is called (from the goroutine that calls fn) with
	// the number of events a host's programs could not report since the
	// last call (its ring buffer was full): at most once a second per
	// host, and once more before MonitorWith returns. Events are never
	// dropped in user space: a slow fn holds the readers back, the ring
	// fills and the programs count what they lose.
	Lost func(host string, n uint64)
}

// Event is one verdict reported by the programs.
type Event struct {
	Time        time.Time      `json:"time"`
	Host        string         `json:"host"`
	Endpoint    string         `json:"endpoint"`  // the endpoint whose side decided
	Direction   string         `json:"direction"` // ingress or egress of that endpoint
	Verdict     string         `json:"verdict"`   // allowed or dropped
	Reason      string         `json:"reason"`
	From        string         `json:"from,omitempty"` // source endpoint, when it is one
	To          string         `json:"to,omitempty"`   // destination endpoint, when it is one
	SrcIdentity uint32         `json:"srcIdentity"`
	DstIdentity uint32         `json:"dstIdentity"`
	Protocol    string         `json:"protocol"`
	Src         netip.AddrPort `json:"src"`
	Dst         netip.AddrPort `json:"dst"`
	Bytes       uint32         `json:"bytes"`
	Rule        string         `json:"rule,omitempty"` // the policy rule that decided
	At          string         `json:"at"`             // "tc" (a packet) or "connect" (the connect hook, before any packet)
	// Of a rule of a cluster policy: its tier ("Admin", "Baseline"), the
	// policy's priority (with the policies given to Monitor) and the
	// rule's action ("Accept", "Deny", "Pass"; a Pass names the rule
	// that handed the connection to the tiers below, where none decided).
	Tier     string `json:"tier,omitempty"`
	Priority *int   `json:"priority,omitempty"`
	Action   string `json:"action,omitempty"`
	// Origin is the compiled entry's origin ("Kind ns/name path"), for
	// observe: Rule as written before a cluster rule's naming.
	Origin string `json:"-"`
	// TCPFlags is the TCP header's flags byte of the packet (0 for other
	// protocols and at the connect hook).
	TCPFlags uint8 `json:"tcpFlags,omitempty"`
}

// ErrLabGone: the lab went down while the monitor watched it.
var ErrLabGone = errors.New("the lab was taken down")

// leaseTime is how long the programs keep reporting after the monitor's
// last renewal: a monitor killed with SIGKILL stops costing anything soon.
const leaseTime = 3 * time.Second

// eventPoll is how often the monitor looks into a ring buffer for events
// that did not wake it (at most that late).
const eventPoll = 50 * time.Millisecond

// Monitor streams the verdicts of every host of a lab to fn until ctx ends
// or fn returns an error. level is MonitorDrops or MonitorAll. rules are
// the lab's compiled rules, to name the rule behind a verdict (nil: none).
// One monitor runs per lab at a time (the ring buffer has one reader).
// started, if not nil, is called once the monitor is reporting. Monitor
// returns ErrLabGone if the lab is taken down (or down and up again)
// meanwhile: it checks every second. pols, if given, are the lab's
// policies: a cluster policy's rule is then named with its tier and
// priority (Policy.TierRef) and its action, as traces name it.
func Monitor(ctx context.Context, lab *topology.Spec, level uint32, rules []policy.Entry, started func(), fn func(Event) error, pols ...*policy.Policy) error {
	return MonitorWith(ctx, lab, MonitorOptions{Level: level, Rules: rules, Pols: pols, Started: started}, fn)
}

// MonitorWith is Monitor with its options, and the events lost reported
// (MonitorOptions.Lost).
func MonitorWith(ctx context.Context, lab *topology.Spec, o MonitorOptions, fn func(Event) error) error {
	level, rules, started, pols := o.Level, o.Rules, o.Started, o.Pols
	if len(lab.Hosts) == 0 {
		return datapath.ErrNoHosts
	}
	ids, err := labIdentity(lab)
	if err != nil {
		return fmt.Errorf("%w: %s (%v)", ErrLabGone, lab.Name, err)
	}
	unlock, err := monitorLock(lab.Name)
	if err != nil {
		return err
	}
	defer unlock()
	type hostRing struct {
		host *topology.Host
		maps *hostMaps
		rd   *ringbuf.Reader
		lost uint64 // cnlab_lost's sum when last reported
	}
	var rings []hostRing
	defer func() {
		for _, r := range rings {
			_ = r.maps.monitor.Put(uint32(0), cnlabMonitor{}) // stop reporting
			if r.rd != nil {
				r.rd.Close()
			}
			r.maps.Close()
		}
	}()
	for i := range lab.Hosts {
		h := &lab.Hosts[i]
		m, err := openHost(lab.Name, h.Name)
		if err != nil {
			return err
		}
		// A lab set up before cnlab_lost existed has none: nothing
		// lost is reported there.
		_ = m.open(h.Name, mapLost)
		rd, err := ringbuf.NewReader(m.events)
		rings = append(rings, hostRing{host: h, maps: m, rd: rd})
		if err != nil {
			return fmt.Errorf("host %s: events: %w", h.Name, err)
		}
		// What was lost before this monitor is not its to report.
		if rings[len(rings)-1].lost, err = m.readLost(); err != nil {
			return fmt.Errorf("host %s: %w", h.Name, err)
		}
	}
	reportLost := func() {
		for i := range rings {
			r := &rings[i]
			n, err := r.maps.readLost()
			if err != nil || n == r.lost {
				continue
			}
			if o.Lost != nil {
				o.Lost(r.host.Name, n-r.lost)
			}
			r.lost = n
		}
	}
	start := now()
	wallStart := time.Now()
	renew := func() error {
		for _, r := range rings {
			if err := r.maps.monitor.Put(uint32(0), cnlabMonitor{Level: level, Until: uint64(now() + leaseTime)}); err != nil {
				return fmt.Errorf("host %s: monitor lease: %w", r.host.Name, err)
			}
		}
		return nil
	}
	if err := renew(); err != nil {
		return err
	}
	if started != nil {
		started()
	}
	names := newNamer(lab, rules, pols)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan Event, 256)
	errc := make(chan error, len(rings))
	var wg sync.WaitGroup
	for _, r := range rings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				// New flows' events do not wake the reader before a
				// batch of them waits (bpf/cnlab.c, emit): it looks
				// anyway at this pace.
				r.rd.SetDeadline(time.Now().Add(eventPoll))
				rec, err := r.rd.Read()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					continue
				}
				if err != nil {
					if !errors.Is(err, os.ErrClosed) {
						errc <- fmt.Errorf("host %s: read events: %w", r.host.Name, err)
					}
					return
				}
				ev, src, dst, ok := decodeAddrs(rec.RawSample)
				if !ok || time.Duration(ev.Time) < start {
					continue // a record left over from an earlier monitor
				}
				select {
				case events <- names.eventFrom(r.host, ev, src, dst, wallStart.Add(time.Duration(ev.Time)-start)):
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var result error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-errc:
			result = err
			break loop
		case <-tick.C:
			if !sameLab(lab, ids) {
				result = fmt.Errorf("%w: %s", ErrLabGone, lab.Name)
				break loop
			}
			if err := renew(); err != nil {
				result = err
				break loop
			}
			reportLost()
		case ev := <-events:
			if err := fn(ev); err != nil {
				result = err
				break loop
			}
		}
	}
	cancel() // unblocks readers waiting to hand over an event
	for _, r := range rings {
		r.rd.Close() // unblocks readers waiting for one
	}
	wg.Wait()
	reportLost()
	return result
}

// readLost sums the host's count of events its ring buffer could not
// take (cnlab_lost, per CPU).
func (m *hostMaps) readLost() (uint64, error) {
	if m.lost == nil {
		return 0, nil
	}
	var per []uint64
	if err := m.lost.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read %s: %w", mapLost, err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// labIdentity is the identity (device and inode) of the lab's state
// directory and of every host's pin directory: a lab taken down and up
// again has new ones, though the same names.
func labIdentity(lab *topology.Spec) ([]os.FileInfo, error) {
	dirs := []string{rundir.Lab(lab.Name)}
	for _, h := range lab.Hosts {
		dirs = append(dirs, HostDir(lab.Name, h.Name))
	}
	ids := make([]os.FileInfo, len(dirs))
	for i, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, err
		}
		ids[i] = fi
	}
	return ids, nil
}

// sameLab reports whether the lab's directories are still those of ids.
func sameLab(lab *topology.Spec, ids []os.FileInfo) bool {
	now, err := labIdentity(lab)
	if err != nil {
		return false
	}
	for i := range ids {
		if !os.SameFile(ids[i], now[i]) {
			return false
		}
	}
	return true
}

func decode(b []byte) (cnlabEvent, bool) {
	var e cnlabEvent
	if len(b) < binary.Size(e) {
		return e, false
	}
	_, err := binary.Decode(b, binary.NativeEndian, &e)
	return e, err == nil
}

// decodeAddrs decodes an event of either path with its addresses: a
// record of the size of an event6 is the IPv6 path's (bpf/cnlab.c, emit6).
func decodeAddrs(b []byte) (e cnlabEvent, src, dst netip.Addr, ok bool) {
	var e6 cnlabEvent6
	if len(b) >= binary.Size(e6) {
		if _, err := binary.Decode(b, binary.NativeEndian, &e6); err != nil {
			return e, src, dst, false
		}
		return e6.E, addrOf6(e6.Saddr), addrOf6(e6.Daddr), true
	}
	if e, ok = decode(b); !ok {
		return e, src, dst, false
	}
	return e, addrOf(e.Saddr), addrOf(e.Daddr), true
}

// namer turns slots, addresses and rule indexes into names.
type namer struct {
	lab    *topology.Spec
	slots  map[string][]string // host -> endpoint IDs by slot
	byAddr map[netip.Addr]string
	rules  map[uint32]ruleName // by RuleRef
}

// ruleName is what an event says of the rule that decided.
type ruleName struct {
	rule, tier, action, origin string
	priority                   *int
}

func newNamer(lab *topology.Spec, rules []policy.Entry, pols []*policy.Policy) *namer {
	n := &namer{lab: lab, slots: map[string][]string{}, byAddr: map[netip.Addr]string{}, rules: map[uint32]ruleName{}}
	byRef := map[string]*policy.Policy{}
	for _, p := range pols {
		if p.Cluster() {
			byRef[p.Ref()] = p
		}
	}
	for _, r := range rules {
		ref := RuleRef(r.Origin)
		if _, ok := n.rules[ref]; ok {
			continue
		}
		rn := ruleName{rule: r.Origin, origin: r.Origin}
		if r.Tier == policy.TierAdmin || r.Tier == policy.TierBaseline {
			rn.tier, rn.action = r.Tier.String(), tierAction(r)
			if p, path := clusterRule(byRef, r.Origin); p != nil {
				prio := p.Priority
				if p.Kind != policy.KindBaselineNP {
					rn.priority = &prio
				}
				if a := p.RuleAction(path); a != "" {
					rn.action = a
				}
				rn.rule = p.TierRef() + " " + path + " " + rn.action
			}
		}
		n.rules[ref] = rn
	}
	for _, h := range lab.Hosts {
		for _, ep := range change.LocalEndpoints(lab, h.Name) {
			n.slots[h.Name] = append(n.slots[h.Name], ep.ID())
		}
	}
	for _, ep := range lab.Endpoints {
		for _, a := range ep.Addrs() {
			n.byAddr[a] = ep.ID()
		}
	}
	return n
}

// tierAction names a cluster-tier entry's action as the APIs do.
func tierAction(r policy.Entry) string {
	switch {
	case r.Deny:
		return policy.ActionDeny
	case r.Pass:
		return policy.ActionPass
	}
	return policy.ActionAccept
}

// clusterRule finds the cluster policy an origin ("Kind name path")
// names, and the rule's path.
func clusterRule(byRef map[string]*policy.Policy, origin string) (*policy.Policy, string) {
	for i := len(origin) - 1; i > 0; i-- {
		if origin[i] == ' ' {
			if p := byRef[origin[:i]]; p != nil {
				return p, origin[i+1:]
			}
		}
	}
	return nil, ""
}

func (n *namer) event(h *topology.Host, e cnlabEvent, at time.Time) Event {
	return n.eventFrom(h, e, addrOf(e.Saddr), addrOf(e.Daddr), at)
}

// eventFrom is event with the packet's addresses (of either family).
func (n *namer) eventFrom(h *topology.Host, e cnlabEvent, src, dst netip.Addr, at time.Time) Event {
	ev := Event{Time: at, Host: h.Name, Direction: policy.Dir(e.Dir).String(), Reason: reasonName(cnlabReason(e.Reason)),
		From: n.byAddr[src], To: n.byAddr[dst], SrcIdentity: e.SrcIdentity, DstIdentity: e.DstIdentity,
		Protocol: protoName(e.Proto), Src: netip.AddrPortFrom(src, e.Sport), Dst: netip.AddrPortFrom(dst, e.Dport),
		Bytes: e.Len, Verdict: "allowed", At: "tc", TCPFlags: e.Tcpflags}
	if cnlabEventAt(e.At) == cnlabEventAtAT_CONNECT {
		ev.At = "connect"
	}
	if isDrop(cnlabReason(e.Reason)) {
		ev.Verdict = "dropped"
	}
	if s := n.slots[h.Name]; int(e.Ep) < len(s) {
		ev.Endpoint = s[e.Ep]
	}
	if e.Rule != uint32(cnlabRuleRefNO_RULE) {
		rn := n.rules[e.Rule]
		ev.Rule, ev.Tier, ev.Priority, ev.Action, ev.Origin = rn.rule, rn.tier, rn.priority, rn.action, rn.origin
	}
	return ev
}

func protoName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 58:
		return "icmpv6"
	case 6, 17, 132:
		return policy.ProtoName(p)
	}
	return fmt.Sprint(p)
}

// monitorLock takes the lab's monitor lock without waiting: the programs
// have one ring buffer per host, and two readers would split its events.
func monitorLock(lab string) (func(), error) {
	path := filepath.Join(rundir.Lab(lab), "monitor.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("monitor lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another cnlab monitor is already watching lab %s (one at a time: they would share its events)", lab)
		}
		return nil, fmt.Errorf("monitor lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// now returns the clock bpf_ktime_get_ns reads.
func now() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
