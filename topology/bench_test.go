package topology

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/testutil"
)

// BenchmarkUpDown measures the kernel work of `up` and `down` (Build and
// Teardown, without ledger or datapath) of a one-host lab with 10, 100
// and 1,000 endpoints. It reports up-s and down-s per lab (ns/op is their
// sum). Each size is built IPv4-only, dual-stack and IPv6-only side by
// side (the target: a dual-stack lab of 1,000 endpoints up in
// under 2x the time of an IPv4 one). Reproduce with:
//
//	go test -run '^$' -bench UpDown -benchtime 3x -count 5 ./topology
func BenchmarkUpDown(b *testing.B) {
	testutil.RequireRoot(b)
	families := []struct {
		name  string
		cidrs []string
	}{{"4", []string{"10.8.0.0/20"}}, {"dual", []string{"10.8.0.0/20", "fd00:8::/64"}}, {"6", []string{"fd00:8::/64"}}}
	for _, n := range []int{10, 100, 1000} {
		for _, fam := range families {
			benchUpDown(b, n, fam.name, fam.cidrs)
		}
	}
}

func benchUpDown(b *testing.B, n int, fam string, cidrs []string) {
	{
		raw := &rawFile{Name: "bench-updown", Hosts: []rawHost{{Name: "h", PodCIDRs: cidrs}}}
		for i := 0; i < n; i++ {
			raw.Endpoints = append(raw.Endpoints, rawEndpoint{Name: fmt.Sprintf("e%d", i)})
		}
		spec, err := resolve(raw, "bench", Overrides{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("endpoints=%d/family=%s", n, fam), func(b *testing.B) {
			var up, down time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := Build(context.Background(), spec, BuildOptions{}); err != nil {
					Teardown(spec.Name, nil)
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := Teardown(spec.Name, nil); err != nil {
					b.Fatal(err)
				}
				up += t1.Sub(t0)
				down += time.Since(t1)
			}
			b.ReportMetric(up.Seconds()/float64(b.N), "up-s")
			b.ReportMetric(down.Seconds()/float64(b.N), "down-s")
		})
	}
}
