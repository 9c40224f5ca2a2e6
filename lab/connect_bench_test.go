package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	ciliumebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
)

// BenchmarkConnect measures, on the eBPF datapath with and without the
// socket-level connect hook, how long a TCP connect() takes to be refused
// when the policy denies it (same host), and what the hook costs an
// allowed connect. Without the hook a denied connect is never refused:
// its SYNs are dropped and the client gives up on its own timeout (1 s
// here; the kernel's default retries last about 127 s).
//
//	go test -run '^$' -bench Connect -benchtime 1x ./lab
func BenchmarkConnect(b *testing.B) {
	testutil.RequireRoot(b)
	for _, dp := range []string{"ebpf", "ebpf-hook"} {
		b.Run(dp, func(b *testing.B) {
			spec := scenarioLab(b, "bench-conn-"+short[dp], dp, "wire")
			ctx := context.Background()
			if _, err := Apply(ctx, spec.Name, mustParse(b, denyYToX)); err != nil {
				b.Fatal(err)
			}
			xa, _ := spec.Endpoint("x/a")
			xc, _ := spec.Endpoint("x/c") // allowed, same host
			yb, _ := spec.Endpoint("y/b") // denied, same host
			srv, err := testutil.ListenEcho(xa.Netns, netip.AddrPortFrom(xa.IP, 9000))
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			to := netip.AddrPortFrom(xa.IP, 9000)
			var allowed, denied []time.Duration
			for i := 0; i < b.N; i++ {
				for k := 0; k < 200; k++ {
					took, err := dial(b, xc, to, time.Second)
					if err != nil {
						b.Fatalf("allowed connect: %v", err)
					}
					allowed = append(allowed, took)
				}
				tries := 200
				if dp == "ebpf" {
					tries = 3 // each waits for the timeout
				}
				for k := 0; k < tries; k++ {
					took, err := dial(b, yb, to, time.Second)
					if err == nil {
						b.Fatal("denied connect succeeded")
					}
					if dp == "ebpf-hook" && !errors.Is(err, syscall.ECONNREFUSED) {
						b.Fatalf("denied connect: %v, want connection refused", err)
					}
					denied = append(denied, took)
				}
			}
			med := func(ds []time.Duration) float64 {
				sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
				return float64(ds[len(ds)/2].Microseconds())
			}
			b.ReportMetric(med(allowed), "allowed-connect-us")
			b.ReportMetric(med(denied), "denied-fails-after-us")
		})
	}
}

// BenchmarkConnectFamilies measures the connect hook's time to refusal
// over IPv4 and IPv6 side by side, on one dual-stack lab: a same-host TCP
// connect that the policy denies (y/b -> x/a with only-x), and an allowed
// one (x/c -> x/a), timed around net.DialTimeout in the endpoint: 200
// allowed, then 200 denied connects per family, the two families
// alternating connect by connect so that both see the same machine.
// Medians per family and kind.
//
//	go test -run '^$' -bench ConnectFamilies -benchtime 1x -count 5 ./lab
func BenchmarkConnectFamilies(b *testing.B) {
	testutil.RequireRoot(b)
	spec := scenarioLabYAML(b, "bench-connfam", "ebpf-hook", scenarios.LabFor(4, 6))
	if _, err := Apply(context.Background(), spec.Name, mustParse(b, denyYToX)); err != nil {
		b.Fatal(err)
	}
	xa, _ := spec.Endpoint("x/a")
	xc, _ := spec.Endpoint("x/c") // allowed, same host
	yb, _ := spec.Endpoint("y/b") // denied, same host
	fams := []int{4, 6}
	to := map[int]netip.AddrPort{}
	for _, fam := range fams {
		a, _ := xa.Addr(fam)
		to[fam] = netip.AddrPortFrom(a, 9000)
		srv, err := testutil.ListenEcho(xa.Netns, to[fam])
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
	}
	// The hooks' own time per run while the denied connects are made,
	// from the kernel's statistics (on while stats is open). They run for
	// every connect on the machine, most passed at once: a few of the
	// runs counted may be other processes'.
	progs := map[int]*ciliumebpf.Program{}
	for fam, name := range map[int]string{4: "connect4", 6: "connect6"} {
		l, err := link.LoadPinnedLink(filepath.Join(ebpf.PinRoot, spec.Name, yb.Host, "links", name), nil)
		if err != nil {
			b.Fatal(err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			b.Fatal(err)
		}
		if progs[fam], err = ciliumebpf.NewProgramFromID(info.Program); err != nil {
			b.Fatal(err)
		}
		defer progs[fam].Close()
	}
	stats, err := ciliumebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	hookNs, hookRuns := map[int]time.Duration{}, map[int]uint64{}
	allowed, denied := map[int][]time.Duration{}, map[int][]time.Duration{}
	for i := 0; i < b.N; i++ {
		for k := 0; k < 200; k++ {
			for _, fam := range fams {
				took, err := dial(b, xc, to[fam], time.Second)
				if err != nil {
					b.Fatalf("allowed IPv%d connect: %v", fam, err)
				}
				allowed[fam] = append(allowed[fam], took)
			}
		}
		// The denied ones apart, as BenchmarkConnect's: the echo
		// server's work for an allowed connect would overlap the next.
		time.Sleep(50 * time.Millisecond)
		before := map[int]*ciliumebpf.ProgramStats{}
		for _, fam := range fams {
			before[fam] = progStats(b, progs[fam])
		}
		for k := 0; k < 200; k++ {
			for _, fam := range fams {
				took, err := dial(b, yb, to[fam], time.Second)
				if !errors.Is(err, syscall.ECONNREFUSED) {
					b.Fatalf("denied IPv%d connect: %v, want connection refused", fam, err)
				}
				denied[fam] = append(denied[fam], took)
			}
		}
		for _, fam := range fams {
			after := progStats(b, progs[fam])
			hookNs[fam] += after.Runtime - before[fam].Runtime
			hookRuns[fam] += after.RunCount - before[fam].RunCount
		}
	}
	med := func(ds []time.Duration) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[len(ds)/2].Nanoseconds()) / 1e3
	}
	for _, fam := range fams {
		b.ReportMetric(med(denied[fam]), fmt.Sprintf("denied-v%d-us", fam))
		b.ReportMetric(med(allowed[fam]), fmt.Sprintf("allowed-v%d-us", fam))
		if hookRuns[fam] > 0 {
			b.ReportMetric(float64(hookNs[fam].Nanoseconds())/float64(hookRuns[fam]), fmt.Sprintf("hook-v%d-ns/run", fam))
		}
	}
}

// progStats reads a program's run statistics.
func progStats(b *testing.B, p *ciliumebpf.Program) *ciliumebpf.ProgramStats {
	b.Helper()
	s, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	return s
}
