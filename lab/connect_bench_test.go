package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"syscall"
	"testing"
	"time"

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
		for k := 0; k < 200; k++ {
			for _, fam := range fams {
				took, err := dial(b, yb, to[fam], time.Second)
				if !errors.Is(err, syscall.ECONNREFUSED) {
					b.Fatalf("denied IPv%d connect: %v, want connection refused", fam, err)
				}
				denied[fam] = append(denied[fam], took)
			}
		}
	}
	med := func(ds []time.Duration) float64 {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return float64(ds[len(ds)/2].Nanoseconds()) / 1e3
	}
	for _, fam := range fams {
		b.ReportMetric(med(denied[fam]), fmt.Sprintf("denied-v%d-us", fam))
		b.ReportMetric(med(allowed[fam]), fmt.Sprintf("allowed-v%d-us", fam))
	}
}
