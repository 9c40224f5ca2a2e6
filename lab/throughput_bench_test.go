package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
	"github.com/cnlab/cnlab/traffic"
)

// manyEntries returns policies giving the server's ingress n+1 policy map
// entries: iperf3's port from the client, and n other ports from it.
func manyEntries(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: iperf, namespace: default}\nspec:\n  podSelector: {matchLabels: {app: server}}\n  ingress:\n  - from:\n    - podSelector: {matchLabels: {app: client}}\n    ports:\n    - {port: 5201}\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "    - {port: %d}\n", 10000+2*i)
	}
	return b.String()
}

// pathUnderTest is a client and server namespace pair to run iperf3 over.
type pathUnderTest struct {
	name           string
	client, server string // netns names
	serverIP       netip.Addr
	cleanup        func()
	hosts          []string // host netns names, for a lab
}

func labPath(b *testing.B, name, preset, dp string, entries int) pathUnderTest {
	b.Helper()
	o := topology.PresetOptions{Link: topology.LinkWire}
	if preset == "chain" {
		o = topology.PresetOptions{Link: topology.ChainVeth, Length: 2}
	}
	spec, err := topology.Preset(preset, o, topology.Overrides{Name: "bench-tp-" + name, Datapath: dp})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := Up(ctx, spec, UpOptions{}); err != nil {
		b.Fatal(err)
	}
	if entries > 0 {
		pols, err := policy.Parse([]byte(manyEntries(entries)), "bench.yaml")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Apply(ctx, spec.Name, pols); err != nil {
			b.Fatal(err)
		}
	}
	cl, _ := spec.Endpoint("default/client")
	sv, _ := spec.Endpoint("default/server")
	var hosts []string
	for _, h := range spec.Hosts {
		hosts = append(hosts, h.Netns)
	}
	return pathUnderTest{name, cl.Netns, sv.Netns, sv.IP, func() { _ = Down(spec.Name, nil) }, hosts}
}

// vethPath is two namespaces joined by one veth pair: the floor.
func vethPath(b *testing.B) pathUnderTest {
	b.Helper()
	a, z := "cnlab.bench-veth.a", "cnlab.bench-veth.z"
	ipA, ipZ := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")
	cleanup := func() { _ = netns.Delete(a); _ = netns.Delete(z) }
	for _, n := range []string{a, z} {
		if err := netns.Create(n, nil); err != nil {
			cleanup()
			b.Fatal(err)
		}
	}
	ha, _ := netns.Handle(a)
	defer ha.Close()
	hz, _ := netns.Handle(z)
	defer hz.Close()
	fz, _ := netns.Open(z)
	defer fz.Close()
	if err := ha.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(fz))}); err != nil {
		cleanup()
		b.Fatal(err)
	}
	for _, x := range []struct {
		h  *netlink.Handle
		ip netip.Addr
	}{{ha, ipA}, {hz, ipZ}} {
		l, _ := x.h.LinkByName("eth0")
		lo, _ := x.h.LinkByName("lo")
		_ = x.h.LinkSetUp(lo)
		if err := x.h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: x.ip.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
			cleanup()
			b.Fatal(err)
		}
		if err := x.h.LinkSetUp(l); err != nil {
			cleanup()
			b.Fatal(err)
		}
	}
	return pathUnderTest{"veth", a, z, ipZ, cleanup, nil}
}

// iperf3 runs one TCP stream for secs seconds (after a second of
// warm-up that is not counted) and returns Gbit/s received.
func iperf3(b *testing.B, p pathUnderTest, secs int) float64 {
	return iperf3Run(b, p, secs, false)
}

// iperf3Small sends 64-byte UDP datagrams as fast as one iperf3 client
// can for secs seconds and returns the datagrams received, in millions
// per second: a per-packet cost shows here, where a TCP stream's 64 KB
// segments hide it.
func iperf3Small(b *testing.B, p pathUnderTest, secs int) float64 {
	return iperf3Run(b, p, secs, true)
}

func iperf3Run(b *testing.B, p pathUnderTest, secs int, small bool) float64 {
	b.Helper()
	srv := exec.Command("iperf3", "-s", "-1", "-p", "5201")
	if err := netns.Start(p.server, srv); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	for try := 0; ; try++ {
		args := []string{"-c", p.serverIP.String(), "-p", "5201", "-t", fmt.Sprint(secs), "-O", "1", "-J"}
		if small {
			args = append(args, "-u", "-l", "64", "-b", "0")
		}
		cli := exec.Command("iperf3", args...)
		var out strings.Builder
		cli.Stdout = &out
		if err := netns.Start(p.client, cli); err != nil {
			b.Fatal(err)
		}
		err := cli.Wait()
		var r struct {
			End struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
				Sum struct { // UDP
					Seconds     float64 `json:"seconds"`
					Packets     float64 `json:"packets"`
					LostPackets float64 `json:"lost_packets"`
				} `json:"sum"`
			} `json:"end"`
			Error string `json:"error"`
		}
		_ = json.Unmarshal([]byte(out.String()), &r)
		if sum := r.End.Sum; small && err == nil && sum.Seconds > 0 {
			return (sum.Packets - sum.LostPackets) / sum.Seconds / 1e6
		}
		if !small && err == nil && r.End.SumReceived.BitsPerSecond > 0 {
			return r.End.SumReceived.BitsPerSecond / 1e9
		}
		if try == 20 || !strings.Contains(r.Error, "connect") {
			b.Fatalf("iperf3 over %s: %v %s", p.name, err, r.Error)
		}
		time.Sleep(100 * time.Millisecond) // server not listening yet
	}
}

// BenchmarkThroughput measures one iperf3 TCP stream between two endpoints,
// on one host and across two, for: the eBPF datapath with 10,000 policy
// map entries on the server, iptables with no policy at all, and the
// floor: a bare veth pair between two namespaces (one host), or two plain
// routing namespaces (a chain of length 2: the same three veth pairs as
// the two-host lab, without bridge or datapath). The paths run in shuffled
// rounds, so drift of the machine does not favour one of them.
//
//	go test -run '^$' -bench Throughput -benchtime 1x -timeout 30m ./lab
func BenchmarkThroughput(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireTool(b, "iperf3", "iperf3")
	const rounds, secs = 5, 5
	for _, scope := range []string{"one-host", "two-hosts"} {
		b.Run(scope, func(b *testing.B) {
			preset := "single-host"
			if scope == "two-hosts" {
				preset = "multi-host"
			}
			paths := []pathUnderTest{
				labPath(b, "ebpf", preset, "ebpf", 10000),
				labPath(b, "ipt", preset, "iptables", 0),
			}
			if scope == "one-host" {
				paths = append(paths, vethPath(b))
			} else {
				paths = append(paths, labPath(b, "bare", "chain", "", 0))
			}
			paths[0].name, paths[1].name, paths[2].name = "ebpf-10k", "iptables-nopolicy", "bare"
			defer func() {
				for _, p := range paths {
					p.cleanup()
				}
			}()
			med := shuffledRounds(b, paths, rounds, secs)
			b.ReportMetric(med["ebpf-10k"]/med["iptables-nopolicy"], "ebpf/iptables")
			b.ReportMetric(med["ebpf-10k"]/med["bare"], "ebpf/bare")
		})
	}
}

// BenchmarkPortBinding measures what binding each endpoint's bridge port
// to its addresses (the "bridge cnlab" table of the netfilter datapaths)
// costs one iperf3 TCP stream, and a flood of 64-byte UDP datagrams,
// between two endpoints of one host, with no policy: iptables and nftables labs, each with its port table and with
// the table deleted from the host (the datapaths as they were before the
// binding). The four paths run in shuffled rounds.
//
//	go test -run '^$' -bench PortBinding -benchtime 1x -timeout 30m ./lab
func BenchmarkPortBinding(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireTool(b, "iperf3", "iperf3")
	const rounds, secs = 5, 3
	var paths []pathUnderTest
	defer func() {
		for _, p := range paths {
			p.cleanup()
		}
	}()
	for _, dp := range []string{"iptables", "nftables"} {
		for _, bound := range []bool{true, false} {
			name := dp + "-bound"
			if !bound {
				name = dp + "-unbound"
			}
			p := labPath(b, short[dp]+"-"+name[len(dp)+1:len(dp)+2], "single-host", dp, 0)
			p.name = name
			paths = append(paths, p)
			for _, h := range p.hosts {
				if !bound {
					if _, err := netns.Run(context.Background(), h, nil, "nft", "delete", "table", "bridge", "cnlab"); err != nil {
						b.Fatalf("%s: %v", h, err)
					}
				}
			}
		}
	}
	for _, m := range []struct {
		name, unit string
		measure    func(*testing.B, pathUnderTest, int) float64
	}{{"tcp-stream", "Gbps", iperf3}, {"udp-64B", "Mpps", iperf3Small}} {
		b.Run(m.name, func(b *testing.B) {
			med := shuffledRoundsOf(b, paths, rounds, secs, m.measure, m.unit)
			b.ReportMetric(med["iptables-bound"]/med["iptables-unbound"], "iptables-bound/unbound")
			b.ReportMetric(med["nftables-bound"]/med["nftables-unbound"], "nftables-bound/unbound")
		})
	}
}

// shuffledRounds runs iperf3 over every path, rounds times per b.N in a
// new random order each round, logs every sample, reports the median,
// min and max of each path in Gbit/s and returns the medians.
func shuffledRounds(b *testing.B, paths []pathUnderTest, rounds, secs int) map[string]float64 {
	return shuffledRoundsOf(b, paths, rounds, secs, iperf3, "Gbps")
}

// shuffledRoundsOf is shuffledRounds with any measure, in unit.
func shuffledRoundsOf(b *testing.B, paths []pathUnderTest, rounds, secs int,
	measure func(*testing.B, pathUnderTest, int) float64, unit string) map[string]float64 {
	got := map[string][]float64{}
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			for _, k := range rand.Perm(len(paths)) {
				got[paths[k].name] = append(got[paths[k].name], measure(b, paths[k], secs))
			}
		}
	}
	med := map[string]float64{}
	for _, p := range paths {
		b.Logf("%s %s: %.3f", p.name, unit, got[p.name])
		xs := append([]float64(nil), got[p.name]...)
		sort.Float64s(xs)
		med[p.name] = xs[len(xs)/2]
		b.ReportMetric(med[p.name], p.name+"-"+unit)
		b.ReportMetric(xs[0], p.name+"-min-"+unit)
		b.ReportMetric(xs[len(xs)-1], p.name+"-max-"+unit)
	}
	return med
}

// BenchmarkRR measures tcp-rr (cnlab rr, 1-byte request and response)
// between two endpoints of one host, client and server pinned to the same
// CPU (the placement with the least noise on a VM: BENCHMARKS.md, "Where
// the client and server run"), through: the eBPF datapath, iptables and
// nftables, each with 10,001 policy entries or rules on the server's
// ingress (the flow's port among them), and a bare veth pair between two
// namespaces. The paths run in shuffled rounds; the metric is the p50 of
// each round, its median over the rounds per path, and the median over
// the rounds of each path's p50 minus the bare pair's in the same round.
//
//	go test -run '^$' -bench 'BenchmarkRR$' -benchtime 1x -timeout 30m ./lab
func BenchmarkRR(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireTool(b, "taskset", "util-linux")
	bin := filepath.Join(b.TempDir(), "cnlab")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/cnlab/cnlab/cmd/cnlab").CombinedOutput(); err != nil {
		b.Fatalf("build cnlab: %v: %s", err, out)
	}
	const rounds, secs = 15, 3
	paths := []pathUnderTest{
		labPath(b, "ebpf", "single-host", "ebpf", 10000),
		labPath(b, "ipt", "single-host", "iptables", 10000),
		labPath(b, "nft", "single-host", "nftables", 10000),
		vethPath(b),
	}
	paths[0].name, paths[1].name, paths[2].name, paths[3].name = "ebpf-10k", "iptables-10k", "nftables-10k", "bare"
	defer func() {
		for _, p := range paths {
			p.cleanup()
		}
	}()
	rr := func(b *testing.B, p pathUnderTest, secs int) float64 {
		srv := exec.Command("taskset", "-c", "0", bin, "rr", "server", "--port", "5201")
		if err := netns.Start(p.server, srv); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
		cli := exec.Command("taskset", "-c", "0", bin, "rr", "client", "--to", netip.AddrPortFrom(p.serverIP, 5201).String(),
			"--duration", fmt.Sprintf("%ds", secs), "--warmup", "1s", "-o", "json")
		var out, errb strings.Builder
		cli.Stdout, cli.Stderr = &out, &errb
		if err := netns.Start(p.client, cli); err != nil {
			b.Fatal(err)
		}
		if err := cli.Wait(); err != nil {
			b.Fatalf("rr over %s: %v: %s", p.name, err, errb.String())
		}
		r, err := traffic.ParseRR([]byte(out.String()))
		if err != nil {
			b.Fatal(err)
		}
		return r.LatencyUs.P50
	}
	got := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		for _, k := range rand.Perm(len(paths)) {
			got[paths[k].name] = append(got[paths[k].name], rr(b, paths[k], secs))
		}
	}
	median := func(xs []float64) float64 {
		xs = append([]float64(nil), xs...)
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	for _, p := range paths {
		b.Logf("%s p50-us: %.2f", p.name, got[p.name])
		b.ReportMetric(median(got[p.name]), p.name+"-p50-us")
		if p.name == "bare" {
			continue
		}
		diff := make([]float64, rounds)
		for r := range diff {
			diff[r] = got[p.name][r] - got["bare"][r]
		}
		b.Logf("%s minus bare, per round: %.2f", p.name, diff)
		b.ReportMetric(median(diff), p.name+"-minus-bare-us")
	}
}
