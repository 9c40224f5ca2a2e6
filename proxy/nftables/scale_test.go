package nftables

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// scaleLab is lab's BenchmarkServiceScale lab (lab/services_bench_test.go):
// four backends and a client on one host, w1 alone labelled one: "yes".
const scaleLab = `name: bench-svc
hosts: [{name: flip, podCIDR: 10.0.192.0/24}]
endpoints:
  - {name: w1, host: flip, labels: {app: web, one: "yes"}}
  - {name: w2, host: flip, labels: {app: web}}
  - {name: w3, host: flip, labels: {app: web}}
  - {name: w4, host: flip, labels: {app: web}}
  - {name: c, host: flip, labels: {app: client}}
`

// scaleTables resolves n ClusterIP Services (port 80 to 8080) of one or
// four backends, and the same with one more: the tables before and after
// the benchmark's "add one".
func scaleTables(tb testing.TB, n, backends int) (*service.Table, *service.Table) {
	sel := "{app: web}"
	if backends == 1 {
		sel = `{one: "yes"}`
	}
	spec, err := topology.Parse([]byte(scaleLab), "bench", topology.Overrides{Datapath: "iptables", Proxy: "nftables"})
	if err != nil {
		tb.Fatal(err)
	}
	text := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: s%d}\nspec: {selector: %s, ports: [{port: 80, targetPort: 8080}]}\n---\n", i, sel)
		}
		return b.String()
	}
	resolve := func(s string, prev *service.Allocations) *service.Resolved {
		svcs, sls, err := service.Parse([]byte(s), "bench.yaml")
		if err != nil {
			tb.Fatal(err)
		}
		r, err := service.Resolve(spec, svcs, sls, prev)
		if err != nil {
			tb.Fatal(err)
		}
		return r
	}
	base := resolve(text(n), nil)
	added := resolve(text(n+1), &base.Allocations)
	return base.Table, added.Table
}

// BenchmarkChangeParts times the user-space parts of Apply for one
// Service added to 10,000 (pure: no kernel), the O(Services) work an
// incremental apply would have to avoid besides nft's own cache dump:
//
//	go test -run '^$' -bench ChangeParts -count 5 ./proxy/nftables
func BenchmarkChangeParts(b *testing.B) {
	for _, backends := range []int{1, 4} {
		from, to := scaleTables(b, 10000, backends)
		have, want := Render(from, "flip"), Render(to, "flip")
		path := filepath.Join(b.TempDir(), "state.json")
		parts := []struct {
			name string
			run  func() error
		}{
			{"digest", func() error { proxy.Digest(to); return nil }},
			{"render", func() error { Render(to, "flip"); return nil }},
			{"diff", func() error { diffScript(&have, &want); return nil }},
			{"save", func() error { return change.SaveState(path, want) }},
			{"load", func() error { var s hostState; return change.LoadState(path, &s) }},
		}
		for _, p := range parts {
			b.Run(fmt.Sprintf("backends=%d/%s", backends, p.name), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if err := p.run(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
