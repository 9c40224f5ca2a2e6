package ebpf

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// benchPolicySize holds the largest case; the inner-map template of the
// harness's collection is sized to match.
const benchPolicySize = 1 << 17

// benchEntries is n distinct ingress entries for endpoint A: the allow for
// R on tcp/80 the benchmarked SYN matches, and n-1 allows for other peers
// (ten ports each), as many peers with a few ports each make them.
func benchEntries(n int) []polEntry { return benchEntriesOf(n, keyBitsAll) }

// benchEntriesOf is benchEntries with entries of prefix length plen: 64
// for single ports (the hash stage), 60 for ranges of 16 ports (the LPM).
func benchEntriesOf(n int, plen uint8) []polEntry {
	if n == 0 {
		return nil
	}
	es := []polEntry{{Peer: idR, Dir: dirIn, Proto: protoTCP, Port: 80 &^ 15, Plen: plen}}
	for i := 1; i < n; i++ {
		es = append(es, polEntry{Peer: uint32(100000 + i/10), Dir: dirIn, Proto: protoTCP,
			Port: uint16(1024 + i%10*32), Plen: plen, Rule: uint32(i)})
	}
	if plen == keyBitsAll {
		es[0].Port = 80
	}
	return es
}

// BenchmarkProgram measures the per-packet cost of cnlab_to_ep with
// BPF_PROG_TEST_RUN (the kernel's own timing, ns/packet; ns/op is the
// wall clock per packet, syscall included). A SYN always goes to policy
// (ipcache lookup, the policy lookups of the peer and of the wildcard
// peer, conntrack create); an ACK of a tracked flow is one conntrack
// lookup. With 0 entries A is not isolated and has no policy map (the
// program skips the policy lookups); from 1 entry on, A is isolated and
// the SYN matches an allow: a single port (entries=N, the hash stage) or
// a range of 16 ports among N ranges (ranges=N, the LPM trie).
//
//	go test -run '^$' -bench BenchmarkProgram -count 10 ./datapath/ebpf
func BenchmarkProgram(b *testing.B) {
	for _, c := range []struct {
		what string
		plen uint8
		ns   []int
	}{{"entries", keyBitsAll, []int{0, 1, 100, 10_000, 100_000}}, {"ranges", 60, []int{1, 100, 10_000, 100_000}}} {
		for _, n := range c.ns {
			b.Run(fmt.Sprintf("syn/%s=%d", c.what, n), func(b *testing.B) {
				h := newHarness(b, harnessOpts{policyMapSize: benchPolicySize})
				reason := cnlabReasonR_ALLOW_UNENFORCED
				if n > 0 {
					h.setEntries(0, epA, cnlabIsolationISO_INGRESS, benchEntriesOf(n, c.plen))
					reason = cnlabReasonR_ALLOW_POLICY
				}
				syn := tcpPkt(addrR, epA.ip, 40000, 80, tcpSYN)
				h.toEp(b, "SYN", syn, actOK, ingress(epA, reason))
				benchRun(b, h, h.objs.CnlabToEp, syn, actOK, ingress(epA, reason))
			})
		}
	}
	// The monitor's cost on the hot path: no monitor (the lease is unset),
	// a monitor for drops (the lease is checked, nothing is reported), a
	// monitor for everything (the flow's events are rate-limited to one a
	// second: one LRU lookup per packet).
	for _, mon := range []struct {
		name  string
		level uint32
	}{{"off", 0}, {"drops", MonitorDrops}, {"all", MonitorAll}, {"flows", MonitorFlows}} {
		b.Run("established/monitor="+mon.name, func(b *testing.B) {
			h := newHarness(b, harnessOpts{policyMapSize: benchPolicySize})
			h.setEntries(0, epA, cnlabIsolationISO_INGRESS, benchEntries(100))
			if mon.level != 0 {
				lease := cnlabMonitor{Level: mon.level, Until: uint64(now() + time.Hour)}
				if err := h.objs.CnlabMonitor.Put(uint32(0), lease); err != nil {
					b.Fatal(err)
				}
			}
			h.toEp(b, "SYN", tcpPkt(addrR, epA.ip, 40000, 80, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
			ack := tcpPkt(addrR, epA.ip, 40000, 80, tcpACK)
			benchRun(b, h, h.objs.CnlabToEp, ack, actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
		})
	}
	// A new flow (the SYN judged by policy each run, allowed by entry
	// 0, whose rule counter moves each run) with each monitor: with
	// "flows" every run is reported (the ring is drained meanwhile, as
	// a monitor would).
	for _, mon := range []struct {
		name  string
		level uint32
	}{{"off", 0}, {"drops", MonitorDrops}, {"flows", MonitorFlows}} {
		b.Run("syn/monitor="+mon.name, func(b *testing.B) {
			h := newHarness(b, harnessOpts{policyMapSize: benchPolicySize})
			h.setEntries(0, epA, cnlabIsolationISO_INGRESS, benchEntries(100))
			if mon.level != 0 {
				h.lease(mon.level)
				rd, err := ringbuf.NewReader(h.objs.CnlabEvents)
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for {
						if _, err := rd.Read(); err != nil {
							return
						}
					}
				}()
				b.Cleanup(func() { rd.Close() })
			}
			syn := tcpPkt(addrR, epA.ip, 40000, 80, tcpSYN)
			h.toEp(b, "SYN", syn, actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
			benchRun(b, h, h.objs.CnlabToEp, syn, actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
		})
	}
	b.Run("established/entries=10000", func(b *testing.B) {
		h := newHarness(b, harnessOpts{policyMapSize: benchPolicySize})
		h.setEntries(0, epA, cnlabIsolationISO_INGRESS, benchEntries(10_000))
		h.toEp(b, "SYN", tcpPkt(addrR, epA.ip, 40000, 80, tcpSYN), actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
		ack := tcpPkt(addrR, epA.ip, 40000, 80, tcpACK)
		h.toEp(b, "ACK", ack, actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
		benchRun(b, h, h.objs.CnlabToEp, ack, actOK, ingress(epA, cnlabReasonR_ALLOW_CT))
	})
}

// benchRun runs prog b.N times on pkt in one BPF_PROG_TEST_RUN and checks
// that every run returned act and took the verdict want.
func benchRun(b *testing.B, h *harness, prog *ebpf.Program, pkt []byte, act uint32, want hit) {
	before := h.counters(b)[want]
	var start time.Time
	reset := func() { // also called when a signal interrupts the runs and they start over
		b.ResetTimer()
		start = time.Now()
	}
	reset()
	ret, perRun, err := prog.Benchmark(pkt, b.N, reset)
	wall := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if ret != act {
		b.Fatalf("%s, want %s", actName(ret), actName(act))
	}
	if got := h.counters(b)[want] - before; got < uint64(b.N) {
		b.Fatalf("%d of %d runs counted as %s", got, b.N, want)
	}
	b.ReportMetric(float64(perRun.Nanoseconds()), "ns/packet")
	b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N), "ns/op")
}

// BenchmarkService measures cnlab_from_ep on a packet from A to a Service
// with 1 to 10,000 frontends in cnlab_svc, beside the same packet sent to
// the backend directly with translation off (services=0). The SYN is
// judged by policy each run (A not isolated) and follows the flow's
// translation entry after the first run; the ACK is the established path
// (one conntrack lookup, the reverse- and forward-entry lookups).
//
//	go test -run '^$' -bench BenchmarkService -count 10 ./datapath/ebpf
func BenchmarkService(b *testing.B) {
	for _, n := range []int{0, 1, 100, 10_000} {
		for _, pk := range []struct {
			name   string
			flags  uint8
			reason cnlabReason
		}{{"syn", tcpSYN, cnlabReasonR_ALLOW_UNENFORCED}, {"established", tcpACK, cnlabReasonR_ALLOW_CT}} {
			b.Run(fmt.Sprintf("%s/services=%d", pk.name, n), func(b *testing.B) {
				h := newHarness(b, harnessOpts{})
				dst, port := addrR, uint16(8080)
				if n > 0 {
					fronts := make([]testFrontend, n)
					for i := range fronts {
						a := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
						fronts[i] = testFrontend{vip: ap(a, 80), proto: protoTCP, backends: []netip.AddrPort{ap(addrR, 8080)}}
					}
					h.setServices(fronts...)
					dst, port = fronts[n-1].vip.Addr(), 80
				}
				h.fromEp(b, "SYN", l4Pkt(epA.ip, dst, protoTCP, 40000, port, tcpSYN, false), actOK, egress(epA, cnlabReasonR_ALLOW_UNENFORCED))
				pkt := l4Pkt(epA.ip, dst, protoTCP, 40000, port, pk.flags, false)
				pkt = append(pkt[:6:6], append(epA.mac[:], pkt[12:]...)...)
				benchRun(b, h, h.objs.CnlabFromEp, pkt, actOK, egress(epA, pk.reason))
			})
		}
	}
}

// BenchmarkFromEp measures the paths of cnlab_from_ep (the front, then
// from_ep_remote or from_ep_local) on a TCP packet from A, which no
// policy isolates: to another host's endpoint R with either host routing
// (remote), and to B on the same host with bpf host routing (local: both
// sides judged, then bpf_redirect_peer). A SYN goes to policy on every
// run; an ACK of the tracked flow is the established path.
//
//	go test -run '^$' -bench BenchmarkFromEp -count 10 ./datapath/ebpf
func BenchmarkFromEp(b *testing.B) {
	for _, c := range []struct {
		name, routing string
		dst           *tep // nil: R, on another host
		act           uint32
	}{
		{"remote/bpf", kind.HostRoutingBPF, nil, actOK},
		{"remote/legacy", kind.HostRoutingLegacy, nil, actOK},
		{"local/bpf", kind.HostRoutingBPF, epB, actRedirect},
	} {
		for _, pk := range []struct {
			name   string
			flags  uint8
			reason cnlabReason
		}{{"syn", tcpSYN, cnlabReasonR_ALLOW_UNENFORCED}, {"established", tcpACK, cnlabReasonR_ALLOW_CT}} {
			b.Run(pk.name+"/"+c.name, func(b *testing.B) {
				h := newHarness(b, harnessOpts{hostRouting: c.routing})
				dst, want := addrR, egress(epA, pk.reason)
				first := []hit{egress(epA, cnlabReasonR_ALLOW_UNENFORCED)}
				if c.dst != nil {
					// The runs share one skb, whose Ethernet header
					// deliver rewrites (the destination's veth as
					// source): with A's MAC as that veth's, every run
					// passes A's source check as the first did.
					d := *c.dst
					d.lxc = epA.mac
					h.addLocal(&d)
					dst, want = c.dst.ip, ingress(c.dst, pk.reason)
					first = append(first, ingress(c.dst, cnlabReasonR_ALLOW_UNENFORCED))
				}
				h.fromEp(b, "SYN", tcpPkt(epA.ip, dst, 40000, 80, tcpSYN), c.act, first...)
				pkt := tcpPkt(epA.ip, dst, 40000, 80, pk.flags)
				pkt = append(pkt[:6:6], append(epA.mac[:], pkt[12:]...)...)
				benchRun(b, h, h.objs.CnlabFromEp, pkt, c.act, want)
			})
		}
	}
}

// tierBenchPolicies are the policies of BenchmarkProgramTiers on the
// scenario lab: a NetworkPolicy isolating x/a's ingress and allowing x/c
// on TCP 80 (the measured flow), and with admin > 0, that many Admin-tier
// policies selecting namespace x (each denying namespace y's db pods, or
// with wildcard any peer, on a port of its own, in both directions) and
// one Baseline policy (denying egress to namespace z on 5432): none
// matches the measured flow.
func tierBenchPolicies(admin int, wildcard bool) []*policy.Policy {
	pols := []*policy.Policy{{Kind: policy.KindNetworkPolicy, Namespace: "x", Name: "web", Specs: []policy.Spec{{
		Subject: policy.Selector{MatchLabels: map[string]string{"app": "web"}},
		Ingress: policy.Direction{Enforce: true, Allow: []policy.Rule{{Path: "spec.ingress[0]",
			Peers: []policy.Peer{{Endpoints: &policy.EndpointSel{Pods: policy.Selector{MatchLabels: map[string]string{"pod": "c"}}, Namespace: "x"}}},
			Ports: []policy.Port{{Protocol: policy.TCP, Port: 80}}}}}}}}}
	if admin == 0 {
		return pols
	}
	nsX := &policy.Selector{MatchLabels: map[string]string{"ns": "x"}}
	for i := range admin {
		peer := policy.Rule{Peers: []policy.Peer{{Endpoints: &policy.EndpointSel{Namespaces: &policy.Selector{MatchLabels: map[string]string{"ns": "y"}},
			Pods: policy.Selector{MatchLabels: map[string]string{"app": "db"}}}}}}
		if wildcard {
			peer = policy.Rule{AnyPeer: true}
		}
		in, out := peer, peer
		in.Path, in.Action, in.Ports = "spec.ingress[0]", policy.ActionDeny, []policy.Port{{Protocol: policy.TCP, Port: 1000 + i}}
		out.Path, out.Action, out.Ports = "spec.egress[0]", policy.ActionDeny, []policy.Port{{Protocol: policy.TCP, Port: 1000 + i}}
		pols = append(pols, &policy.Policy{Kind: policy.KindAdminNP, Name: fmt.Sprintf("admin-%d", i), Tier: policy.TierAdmin, Priority: i % 1000,
			Specs: []policy.Spec{{SubjectNamespaces: nsX, Ingress: policy.Direction{Ordered: []policy.Rule{in}}, Egress: policy.Direction{Ordered: []policy.Rule{out}}}}})
	}
	pols = append(pols, &policy.Policy{Kind: policy.KindBaselineNP, Name: "default", Tier: policy.TierBaseline,
		Specs: []policy.Spec{{SubjectNamespaces: &policy.Selector{}, Egress: policy.Direction{Ordered: []policy.Rule{{Path: "spec.egress[0]", Action: policy.ActionDeny,
			Peers: []policy.Peer{{Endpoints: &policy.EndpointSel{Namespaces: &policy.Selector{MatchLabels: map[string]string{"ns": "z"}}}}},
			Ports: []policy.Port{{Protocol: policy.TCP, Port: 5432}}}}}}}})
	return pols
}

// BenchmarkProgramTiers measures the per-packet cost of cluster policies
// on cnlab_to_ep: a SYN from x/c to x/a's TCP 80 (A here, with x/a's
// entries and isolation as plan renders them from compiled policies, and
// the plan's ipcache), allowed by a NetworkPolicy, with no cluster policy
// and with 100 Admin-tier policies and 1 Baseline-tier policy that do not
// match it; "wildcard": the Admin policies' peers are any peer, so the
// program looks the wildcard peer up too (an entry for any peer costs
// that second lookup in any tier).
//
//	go test -run '^$' -bench BenchmarkProgramTiers -count 6 ./datapath/ebpf
func BenchmarkProgramTiers(b *testing.B) {
	spec, err := topology.Parse([]byte(scenarios.Lab), "bench", topology.Overrides{Name: "bench-tiers", Datapath: "ebpf"})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		admin    int
		wildcard bool
	}{{"cluster=none", 0, false}, {"cluster=100admin+1baseline", 100, false}, {"cluster=100admin+1baseline/wildcard", 100, true}} {
		b.Run("syn/"+c.name, func(b *testing.B) {
			m, err := policy.NewModel(spec, tierBenchPolicies(c.admin, c.wildcard))
			if err != nil {
				b.Fatal(err)
			}
			comp, err := m.Compile()
			if err != nil {
				b.Fatal(err)
			}
			plans, err := plan(spec, comp)
			if err != nil {
				b.Fatal(err)
			}
			var pe *epPlan
			var src netip.Addr
			for _, hp := range plans {
				for i := range hp.Endpoints {
					if hp.Endpoints[i].ID == "x/a" {
						pe = &hp.Endpoints[i]
					}
				}
			}
			for _, ep := range spec.Endpoints {
				if ep.ID() == "x/c" {
					src = ep.IP
				}
			}
			h := newHarness(b, harnessOpts{policyMapSize: benchPolicySize})
			ipc, err := buildIPCache(append(slices.Clone(plans[spec.Hosts[0].Name].IPCache),
				ipEntry{Prefix: netip.PrefixFrom(epA.ip, 32), Key: epA.identity, Identity: epA.identity}))
			h.must(err)
			h.must(h.objs.CnlabIpcache.Put(uint32(0), ipc))
			ipc.Close()
			h.setEntries(0, epA, pe.Enforce&(cnlabIsolationISO_INGRESS|cnlabIsolationISO_EGRESS), pe.Entries)
			syn := tcpPkt(src, epA.ip, 40000, 80, tcpSYN)
			h.toEp(b, "SYN", syn, actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
			benchRun(b, h, h.objs.CnlabToEp, syn, actOK, ingress(epA, cnlabReasonR_ALLOW_POLICY))
			b.ReportMetric(float64(len(pe.Entries)), "entries")
		})
	}
}
