package lab

import (
	"context"
	"errors"
	"net/netip"
	"sort"
	"syscall"
	"testing"
	"time"

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
