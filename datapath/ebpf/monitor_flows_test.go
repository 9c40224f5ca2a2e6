package ebpf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// lease sets the monitor's level for an hour, as MonitorWith's renewals do.
func (h *harness) lease(level uint32) {
	h.tb.Helper()
	h.must(h.objs.CnlabMonitor.Put(uint32(0), cnlabMonitor{Level: level, Until: uint64(now() + time.Hour)}))
}

// drain reads the events in cnlab_events now.
func (h *harness) drain(t testing.TB) []cnlabEvent {
	t.Helper()
	rd, err := ringbuf.NewReader(h.objs.CnlabEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []cnlabEvent
	for {
		rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		ev, ok := decode(rec.RawSample)
		if !ok {
			t.Fatal("short event")
		}
		out = append(out, ev)
	}
}

// lost sums cnlab_lost.
func (h *harness) lost(t testing.TB) uint64 {
	t.Helper()
	var per []uint64
	h.must(h.objs.CnlabLost.Lookup(uint32(0), &per))
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

func eventReasons(evs []cnlabEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s:%d", reasonName(cnlabReason(e.Reason)), e.Sport))
	}
	return out
}

// TestMonitorFlows: with MonitorFlows every new flow's verdict is
// reported once (not rate-limited: two flows in the same second both),
// established packets never, drops rate-limited as with MonitorAll; with
// MonitorDrops no allowed packet is reported.
func TestMonitorFlows(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.setPolicy(0, epA, cnlabIsolationISO_INGRESS, allow(policy.Ingress, idR, protoTCP, 80))
	h.runAs(epA)
	h.lease(MonitorFlows)
	syn := func(src, sport uint16) []byte { return tcpPkt(addrR, epA.ip, sport, src, tcpSYN) }
	h.toEp(t, "SYN 1", syn(80, 40001), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	h.toEp(t, "ACK 1", tcpPkt(addrR, epA.ip, 40001, 80, tcpACK), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	h.toEp(t, "ACK 1 again", tcpPkt(addrR, epA.ip, 40001, 80, tcpACK), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	h.toEp(t, "SYN 2", syn(80, 40002), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	h.toEp(t, "ACK 2", tcpPkt(addrR, epA.ip, 40002, 80, tcpACK), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	h.toEp(t, "denied SYN", syn(81, 40003), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	h.toEp(t, "denied SYN again", syn(81, 40003), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	// B is not isolated: its egress to the world is a new flow too.
	h.runAs(epB)
	h.fromEp(t, "B's SYN", tcpPkt(epB.ip, addrW, 40004, 443, tcpSYN), actOK, egress(epB, cnlabReasonR_ALLOW_UNENFORCED))
	h.toEp(t, "B's answer", tcpPkt(addrW, epB.ip, 443, 40004, tcpSYN|tcpACK), actOK, ingress(epB, cnlabReasonR_ALLOW_CT))
	got := eventReasons(h.drain(t))
	want := []string{"policy-allow:40001", "policy-allow:40002", "policy-default-deny:40003", "not-isolated:40004"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MonitorFlows events %v, want %v", got, want)
	}
	// The same new flow again (its SYN judged again, as after its entry
	// went): reported again, not rate-limited.
	h.runAs(epA)
	h.toEp(t, "SYN 5", syn(80, 40005), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	h.must(h.objs.CnlabCt.Delete(cnlabCtKey{Saddr: ip4(addrR), Daddr: ip4(epA.ip), Sport: 40005, Dport: 80, Proto: protoTCP, Scope: 1 + dirIn, Ep: uint16(epA.index)}))
	h.toEp(t, "SYN 5 again", syn(80, 40005), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	if got := eventReasons(h.drain(t)); fmt.Sprint(got) != "[policy-allow:40005 policy-allow:40005]" {
		t.Errorf("a flow judged twice: events %v, want two", got)
	}
	if n := h.lost(t); n != 0 {
		t.Errorf("%d events lost", n)
	}
	h.lease(MonitorDrops)
	h.toEp(t, "SYN 6", syn(80, 40006), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	h.toEp(t, "denied SYN 7", syn(81, 40007), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	if got := eventReasons(h.drain(t)); fmt.Sprint(got) != "[policy-default-deny:40007]" {
		t.Errorf("MonitorDrops events %v, want the drop only", got)
	}
}

// TestMonitorLostCounted: events a full ring cannot take are counted in
// cnlab_lost, one for each.
func TestMonitorLostCounted(t *testing.T) {
	h := newHarness(t, harnessOpts{ringSize: uint32(os.Getpagesize())})
	h.lease(MonitorFlows)
	const n = 300
	for i := range n {
		h.toEp(t, "SYN", tcpPkt(addrR, epA.ip, uint16(20000+i), 80, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_UNENFORCED))
	}
	got := len(h.drain(t))
	lost := h.lost(t)
	if got == 0 || lost == 0 || uint64(got)+lost != n {
		t.Errorf("%d events read and %d lost of %d", got, lost, n)
	}
}

// synBurst runs n SYNs of distinct flows from R to A through cnlab_to_ep
// as fast as BPF_PROG_TEST_RUN goes (no counters read between them).
func (h *harness) synBurst(t testing.TB, n int) {
	t.Helper()
	for i := range n {
		opts := ebpf.RunOptions{Data: tcpPkt(addrR, epA.ip, uint16(10000+i%50000), 80, tcpSYN), Context: skbCtx{Ifindex: testIfindex}}
		if ret, err := h.objs.CnlabToEp.Run(&opts); err != nil || ret != actOK {
			t.Fatalf("SYN %d: %s, %v", i, actName(ret), err)
		}
	}
}

// pinHarness pins the harness's maps as Setup pins a host's (under a
// PinRoot and a rundir.Dir of the test's own), for MonitorWith and
// RuleCountersOf: a lab of one host, h1, without endpoints.
func pinHarness(t *testing.T, h *harness) *topology.Spec {
	t.Helper()
	root, err := os.MkdirTemp("/sys/fs/bpf", "cnlab-test-")
	if err != nil {
		t.Skipf("no bpffs: %v", err)
	}
	oldRoot, oldDir := PinRoot, rundir.Dir
	PinRoot, rundir.Dir = root, t.TempDir()
	lab := &topology.Spec{Name: "progtest", Hosts: []topology.Host{{Name: "h1"}}}
	t.Cleanup(func() {
		forgetPinned(filepath.Join(PinRoot, lab.Name))
		PinRoot, rundir.Dir = oldRoot, oldDir
		os.RemoveAll(root)
	})
	if err := os.MkdirAll(rundir.Lab(lab.Name), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := HostDir(lab.Name, "h1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	maps := map[string]*ebpf.Map{mapConfig: h.objs.CnlabConfig, mapMonitor: h.objs.CnlabMonitor, mapLXC: h.objs.CnlabLxc,
		mapLocal: h.objs.CnlabLocal, mapIPCache: h.objs.CnlabIpcache, mapPolicy: h.objs.CnlabPolicy, mapExact: h.objs.CnlabPolicyExact,
		mapEnforce: h.objs.CnlabEnforce, mapCT: h.objs.CnlabCt, mapCounter: h.objs.CnlabCounters, mapEvents: h.objs.CnlabEvents,
		mapSockEP: h.objs.CnlabSockep, mapLost: h.objs.CnlabLost, mapRuleCounters: h.objs.CnlabRuleCounters,
		mapIPCache6: h.objs.CnlabIpcache6, mapLocal6: h.objs.CnlabLocal6, mapCT6: h.objs.CnlabCt6}
	for name, m := range maps {
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return lab
}

// TestMonitorWithReportsLost: a monitor whose fn stalls while a burst of
// new flows overflows the ring reports, through Lost, every event it did
// not deliver: delivered + lost is every flow.
func TestMonitorWithReportsLost(t *testing.T) {
	h := newHarness(t, harnessOpts{ringSize: uint32(os.Getpagesize())})
	lab := pinHarness(t, h)
	const n = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got, lost uint64
	release := make(chan struct{})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- MonitorWith(ctx, lab, MonitorOptions{Level: MonitorFlows, Started: func() { close(started) },
			Lost: func(host string, k uint64) {
				mu.Lock()
				lost += k
				mu.Unlock()
			}}, func(Event) error {
			<-release
			mu.Lock()
			got++
			mu.Unlock()
			return nil
		})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatal(err)
	}
	// Quickly: fn stalls the monitor's loop, which renews the lease.
	h.synBurst(t, n)
	close(release)
	for {
		mu.Lock()
		g, l := got, lost
		mu.Unlock()
		if g+l == n {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d events delivered and %d reported lost of %d", g, l, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if lost == 0 {
		t.Errorf("nothing lost: %d delivered", got)
	}
	if l := h.lost(t); l != lost {
		t.Errorf("cnlab_lost %d, reported %d", l, lost)
	}
}

// renderRefs is render with each entry's rule its origin's RuleRef, as
// plan renders them.
func renderRefs(rules ...policy.Entry) []polEntry {
	var raw []polEntry
	for _, r := range rules {
		for _, pp := range portPrefixes(r) {
			raw = append(raw, rawEntry(r, r.PeerID, pp, RuleRef(r.Origin)))
		}
	}
	return flatten(raw)
}

// TestRuleCounters: a rule's counter moves with each new flow it allows
// and each packet it denies, never with established packets; the default
// deny is counted per endpoint and direction; RuleCountersOf names the
// rules by origin.
func TestRuleCounters(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	allowR := allow(policy.Ingress, idR, protoTCP, 80)
	allowR.Origin = "NetworkPolicy x/a spec.ingress[0]"
	denyR2 := deny(policy.Ingress, idR2, protoTCP, 80)
	denyR2.Origin = "AdminNetworkPolicy deny spec.ingress[0]"
	rules := []policy.Entry{allowR, denyR2}
	h.setEntries(0, epA, cnlabIsolationISO_INGRESS, renderRefs(rules...))
	syn := tcpPkt(addrR, epA.ip, 40001, 80, tcpSYN)
	h.toEp(t, "SYN 1", syn, actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	for range 5 {
		h.toEp(t, "ACK 1", tcpPkt(addrR, epA.ip, 40001, 80, tcpACK), actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	}
	h.toEp(t, "SYN 2", tcpPkt(addrR, epA.ip, 40002, 80, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
	for i := range 3 {
		h.toEp(t, "denied SYN", tcpPkt(addrR2, epA.ip, uint16(40010+i), 80, tcpSYN), actShot, ingress(epA, cnlabReasonR_DROP_DENY))
	}
	h.toEp(t, "default-denied SYN", tcpPkt(addrW, epA.ip, 40020, 80, tcpSYN), actShot, ingress(epA, cnlabReasonR_DROP_DEFAULT))
	lab := pinHarness(t, h)
	got, err := RuleCountersOf(context.Background(), lab, rules)
	if err != nil {
		t.Fatal(err)
	}
	l := uint64(len(syn))
	want := []datapath.RuleCounter{
		{Host: "h1", Endpoint: "slot-0", Direction: "ingress", Rule: denyR2.Origin, Verdict: "deny", Packets: 3, Bytes: 3 * l},
		{Host: "h1", Endpoint: "slot-0", Direction: "ingress", Rule: allowR.Origin, Verdict: "allow", Packets: 2, Bytes: 2 * l},
		{Host: "h1", Endpoint: "slot-0", Direction: "ingress", Rule: datapath.DefaultDenyRule, Verdict: "default-deny", Packets: 1, Bytes: l},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("RuleCountersOf:\n got %v\nwant %v", got, want)
	}
	// Through the interface: named by the file Apply leaves, by
	// reference where it names none.
	got, err = (&Datapath{}).RuleCounters(context.Background(), lab)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Rule != fmt.Sprintf("rule %08x", RuleRef(allowR.Origin)) {
		t.Errorf("RuleCounters without names: %v", got)
	}
	for range 2 { // the second time, the file names the set already
		if err := saveRuleNames(lab.Name, &policy.Compiled{Set: "s1", Rules: rules}); err != nil {
			t.Fatal(err)
		}
	}
	got, err = (&Datapath{}).RuleCounters(context.Background(), lab)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("RuleCounters:\n got %v\nwant %v", got, want)
	}
}

// TestMonitorFlowRate measures (CNLAB_MEASURE=1) which rate of new flows
// MonitorWith delivers without loss to an fn that writes each event as a
// JSON line (to /dev/null), per ring size: SYNs of distinct flows paced
// by the millisecond for 2 s, through cnlab_to_ep with BPF_PROG_TEST_RUN.
//
//	CNLAB_MEASURE=1 go test -count=1 -run TestMonitorFlowRate -v ./datapath/ebpf
func TestMonitorFlowRate(t *testing.T) {
	if os.Getenv("CNLAB_MEASURE") == "" {
		t.Skip("a measurement: CNLAB_MEASURE=1 to run it")
	}
	for _, ring := range []uint32{1 << 18, 1 << 20, 1 << 22} {
		for _, rate := range []int{10_000, 20_000, 50_000, 100_000, 1_000_000} {
			t.Run(fmt.Sprintf("ring=%dKiB/rate=%d", ring>>10, rate), func(t *testing.T) {
				h := newHarness(t, harnessOpts{ringSize: ring})
				lab := pinHarness(t, h)
				null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer null.Close()
				enc := json.NewEncoder(null)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var mu sync.Mutex
				var got, lost uint64
				started := make(chan struct{})
				done := make(chan error, 1)
				go func() {
					done <- MonitorWith(ctx, lab, MonitorOptions{Level: MonitorFlows, Started: func() { close(started) },
						Lost: func(_ string, k uint64) { mu.Lock(); lost += k; mu.Unlock() }},
						func(ev Event) error { mu.Lock(); got++; mu.Unlock(); return enc.Encode(ev) })
				}()
				<-started
				const secs = 2
				pkts := make([][]byte, 50_000)
				for i := range pkts {
					pkts[i] = tcpPkt(addrR, epA.ip, uint16(10000+i), 80, tcpSYN)
				}
				begin := time.Now()
				sent := 0
				for time.Since(begin) < secs*time.Second {
					target := int(float64(rate) * time.Since(begin).Seconds())
					for ; sent < target; sent++ {
						opts := ebpf.RunOptions{Data: pkts[sent%len(pkts)], Context: skbCtx{Ifindex: testIfindex}}
						if _, err := h.objs.CnlabToEp.Run(&opts); err != nil {
							t.Fatal(err)
						}
					}
					time.Sleep(time.Millisecond)
				}
				achieved := float64(sent) / time.Since(begin).Seconds()
				deadline := time.Now().Add(5 * time.Second)
				for time.Now().Before(deadline) {
					mu.Lock()
					g, l := got, lost
					mu.Unlock()
					if g+l >= uint64(sent) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				cancel()
				<-done
				t.Logf("ring %d KiB, asked %d flows/s, sent %.0f/s: %d delivered, %d lost (%.2f%%)", ring>>10, rate, achieved, got, lost, 100*float64(lost)/float64(sent))
			})
		}
	}
}
