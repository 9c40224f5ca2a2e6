package lab

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/topology"
)

// noMatchTiers returns n Admin-tier ClusterNetworkPolicies and a
// BaselineAdminNetworkPolicy, all selecting every pod, none of whose
// rules match a connection to port 9000 or 5201 between the lab's
// endpoints: each Admin policy denies ingress from every namespace on one
// TCP port of 20000-20999 and egress to one address of 192.0.2.0/24; the
// Baseline denies ingress on TCP 19999 and egress to 198.51.100.0/24.
// Every endpoint's chains (or maps) hold them all, walked before the
// NetworkPolicy tier on each new connection.
func noMatchTiers(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: admin-%d}
spec:
  tier: Admin
  priority: %d
  subject: {namespaces: {}}
  ingress:
  - action: Deny
    from: [{namespaces: {}}]
    protocols: [{tcp: {destinationPort: {number: %d}}}]
  egress:
  - action: Deny
    to: [{networks: [192.0.2.%d/32]}]
---
`, i, i, 20000+i, i%256)
	}
	b.WriteString(`apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {}}
  ingress:
  - action: Deny
    from: [{namespaces: {}}]
    ports: [{portNumber: {port: 19999}}]
  egress:
  - action: Deny
    to: [{networks: [198.51.100.0/24]}]
`)
	return b.String()
}

// udpNewFlow sends 64-byte UDP datagrams from the client to the server
// for a second (after 0.3 s not counted) and returns the datagrams sent
// and received, in millions per second. The server never answers, so
// conntrack never sees a reply: every datagram is in state NEW and walks
// the chains, as a connection's first packet does. A send on a veth runs
// the path (bridge, netfilter) on the sender's CPU, so the rate sent
// follows the path's cost; the rate received also depends on the
// receiver getting a CPU (two on this VM, shared).
func udpNewFlow(b *testing.B, client, server string, ip netip.Addr) (sent, received float64) {
	b.Helper()
	to := &net.UDPAddr{IP: ip.AsSlice(), Port: 9001}
	var rc, sc *net.UDPConn
	if err := netns.Do(server, func() (err error) { rc, err = net.ListenUDP("udp4", to); return err }); err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	_ = rc.SetReadBuffer(4 << 20)
	if err := netns.Do(client, func() (err error) { sc, err = net.DialUDP("udp4", nil, to); return err }); err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	const warm, secs = 300 * time.Millisecond, time.Second
	start := time.Now()
	var counting atomic.Bool
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		_ = rc.SetReadDeadline(start.Add(warm + secs + 200*time.Millisecond))
		for {
			if _, err := rc.Read(buf); err != nil {
				return
			}
			if counting.Load() {
				n.Add(1)
			}
		}
	}()
	msg := make([]byte, 64)
	var sends int64
	for time.Since(start) < warm+secs {
		if !counting.Load() && time.Since(start) >= warm {
			counting.Store(true)
		}
		if _, err := sc.Write(msg); err == nil && counting.Load() {
			sends++
		}
	}
	counting.Store(false)
	<-done
	return float64(sends) / secs.Seconds() / 1e6, float64(n.Load()) / secs.Seconds() / 1e6
}

// BenchmarkTiers measures what 100 Admin-tier policies and a Baseline
// one that do not match the measured flow (noMatchTiers) cost the
// netfilter datapaths, against no policy, side by side: the single-host
// preset on iptables and nftables, each once without policy and once
// with the cluster policies, in shuffled order within each round. The
// measures are a TCP connect() from client to server (median of 500 per
// round, µs): its SYN is the packet that walks the chains (the tiers'
// and the NetworkPolicy tier's), every later packet of a connection is
// accepted by conntrack first whatever the policies; and 64-byte UDP
// datagrams that the server never answers (udpNewFlow: each walks the
// chains), received per second.
//
//	go test -run '^$' -bench 'BenchmarkTiers$' -benchtime 1x -timeout 30m ./lab
func BenchmarkTiers(b *testing.B) {
	testutil.RequireRoot(b)
	const rounds, connects = 9, 500
	type path struct {
		name           string
		client, server *topology.Endpoint
		cleanup        func()
	}
	var paths []path
	defer func() {
		for _, p := range paths {
			p.cleanup()
		}
	}()
	for _, dp := range []string{"iptables", "nftables"} {
		for _, tiers := range []bool{false, true} {
			name := fmt.Sprintf("tnf-%s-%v", short[dp], tiers)
			p := labPath(b, name, "single-host", dp, 0)
			if tiers {
				if _, err := Apply(context.Background(), "bench-tp-"+name, mustParse(b, noMatchTiers(100))); err != nil {
					p.cleanup()
					b.Fatal(err)
				}
			}
			srv, err := testutil.ListenEcho(p.server, netip.AddrPortFrom(p.serverIP, 9000))
			if err != nil {
				p.cleanup()
				b.Fatal(err)
			}
			cl := &topology.Endpoint{Netns: p.client}
			sv := &topology.Endpoint{Netns: p.server, IP: p.serverIP}
			label := dp + map[bool]string{false: "-none", true: "-100admin+1baseline"}[tiers]
			paths = append(paths, path{label, cl, sv, func() { srv.Close(); p.cleanup() }})
		}
	}
	got := map[string][]float64{}     // connect p50 per round, µs
	udp := map[string][]float64{}     // new-flow UDP datagrams sent, Mpps
	udpRecv := map[string][]float64{} // and received
	failed := map[string]int{}
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			for _, k := range rand.Perm(len(paths)) {
				p := paths[k]
				var took []time.Duration
				err := netns.Do(p.client.Netns, func() error {
					for c := 0; c < connects; c++ {
						start := time.Now()
						conn, err := net.DialTimeout("tcp4", netip.AddrPortFrom(p.server.IP, 9000).String(), 3*time.Second)
						if err != nil {
							failed[p.name]++
							continue
						}
						took = append(took, time.Since(start))
						conn.Close()
					}
					return nil
				})
				if err != nil || len(took) == 0 {
					b.Fatalf("%s: %v", p.name, err)
				}
				sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
				got[p.name] = append(got[p.name], float64(took[len(took)/2].Nanoseconds())/1e3)
				sent, recv := udpNewFlow(b, p.client.Netns, p.server.Netns, p.server.IP)
				udp[p.name] = append(udp[p.name], sent)
				udpRecv[p.name] = append(udpRecv[p.name], recv)
			}
		}
	}
	median := func(xs []float64) (float64, float64, float64) {
		xs = append([]float64(nil), xs...)
		sort.Float64s(xs)
		return xs[len(xs)/2], xs[0], xs[len(xs)-1]
	}
	for _, m := range []struct {
		name, unit string
		got        map[string][]float64
	}{{"connect p50", "us", got}, {"udp-new-64B sent", "Mpps", udp}, {"udp-new-64B received", "Mpps-received", udpRecv}} {
		for _, p := range paths {
			med, lo, hi := median(m.got[p.name])
			b.Logf("%s %s per round, %s: %.3f (median %.3f, %.3f-%.3f; %d connects failed)", p.name, m.name, m.unit, m.got[p.name], med, lo, hi, failed[p.name])
			b.ReportMetric(med, p.name+"-"+m.unit)
		}
		for _, dp := range []string{"iptables", "nftables"} {
			none, tiers := m.got[dp+"-none"], m.got[dp+"-100admin+1baseline"]
			ratio := make([]float64, len(none))
			for r := range ratio {
				ratio[r] = tiers[r] / none[r]
			}
			med, lo, hi := median(ratio)
			b.Logf("%s %s tiers/none per round: %.3f (median %.3f, %.3f-%.3f)", dp, m.name, ratio, med, lo, hi)
			b.ReportMetric(med, dp+"-"+m.unit+"-tiers/none")
		}
	}
}
