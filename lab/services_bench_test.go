package lab

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	proxyregistry "github.com/cnlab/cnlab/proxy/registry"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// scaleLab: four backends and a client on one host. w1 alone has label
// one: "yes", for Services with one backend.
const scaleLab = `name: %s
hosts: [{name: flip, podCIDR: 10.0.192.0/24}]
endpoints:
  - {name: w1, host: flip, labels: {app: web, one: "yes"}}
  - {name: w2, host: flip, labels: {app: web}}
  - {name: w3, host: flip, labels: {app: web}}
  - {name: w4, host: flip, labels: {app: web}}
  - {name: c, host: flip, labels: {app: client}}
`

// scaleServices renders n ClusterIP Services (port 80 to 8080) selecting
// one or four backends, and one more, "drain", whose backends are a
// user-written slice (so that one can be marked not ready).
func scaleServices(n, backends int, drained bool) string {
	sel := "{app: web}"
	if backends == 1 {
		sel = `{one: "yes"}`
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: s%d}\nspec: {selector: %s, ports: [{port: 80, targetPort: 8080}]}\n---\n", i, sel)
	}
	b.WriteString("apiVersion: v1\nkind: Service\nmetadata: {name: drain}\nspec: {ports: [{port: 80, targetPort: 8080}]}\n---\n")
	b.WriteString("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: drain-1, labels: {kubernetes.io/service-name: drain}}\naddressType: IPv4\nports: [{port: 8080}]\nendpoints:\n")
	for i := 0; i < backends; i++ {
		ready := "true"
		if drained && i == 0 {
			ready = "false"
		}
		fmt.Fprintf(&b, "  - {addresses: [10.0.192.%d], conditions: {ready: %s}}\n", i+2, ready)
	}
	return b.String()
}

// BenchmarkServiceScale measures the service proxies with 1 to 10,000
// Services of 1 or 4 backends on one host (issue [5/9]'s targets):
//
//	resolve-s  parsing and resolving the Services (no kernel)
//	full-s     the proxy's apply of every Service onto a host serving none
//	add-s      one Service added with all the others in place
//	connect-s  from the start of that apply to the first connection
//	           through the new Service that a backend accepts
//	drain-s    one backend of one Service marked not ready
//	remove-s   the added Service removed again
//	rules      the proxy's kernel state: iptables rules (-A lines),
//	           nftables rules and map elements (lines of nft list table),
//	           or eBPF map entries (frontends and backend slots in use)
//
// Every apply goes through the lab's applyTable, in this one process:
// a proxy that implements ApplyChange gets the change from the table
// applied before (full-s is then a change from no Services).
//
// Reproduce with:
//
//	go test -run '^$' -bench ServiceScale -benchtime 1x -count 3 -timeout 60m ./lab
func BenchmarkServiceScale(b *testing.B) {
	testutil.RequireRoot(b)
	for _, px := range []string{"iptables", "nftables", "ebpf"} {
		for _, backends := range []int{1, 4} {
			for _, n := range []int{1, 10, 100, 1000, 10000} {
				b.Run(fmt.Sprintf("%s/backends=%d/services=%d", px, backends, n), func(b *testing.B) {
					benchServiceScale(b, px, backends, n)
				})
			}
		}
	}
}

func benchServiceScale(b *testing.B, px string, backends, n int) {
	dp := "iptables"
	if px == "ebpf" {
		dp = "ebpf"
	}
	spec, err := topology.Parse([]byte(fmt.Sprintf(scaleLab, "bench-svc")), "bench", topology.Overrides{Datapath: dp, Proxy: px})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := Up(ctx, spec, UpOptions{}); err != nil {
		b.Fatal(err)
	}
	defer Down(spec.Name, nil)
	p, err := proxyregistry.New(kind.Proxy(px))
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Setup(ctx, spec); err != nil {
		b.Fatal(err)
	}
	// Backends listen on 8080 for the connect measurement.
	for i := 1; i <= backends; i++ {
		ep, _ := spec.Endpoint(fmt.Sprintf("w%d", i))
		var ln net.Listener
		if err := netns.Do(ep.Netns, func() (err error) { ln, err = net.Listen("tcp4", ":8080"); return }); err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	client, _ := spec.Endpoint("c")
	resolve := func(text string, prev *service.Allocations) *service.Resolved {
		svcs, sls, err := service.Parse([]byte(text), "bench.yaml")
		if err != nil {
			b.Fatal(err)
		}
		r, err := service.Resolve(spec, svcs, sls, prev)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	// Through the lab's path (applyTable): a proxy that can apply a
	// change from the table it last applied in this process is handed it.
	apply := func(t *service.Table) time.Duration {
		t0 := time.Now()
		if err := applyTable(ctx, spec, p, t); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var tResolve, tFull, tAdd, tConnect, tDrain, tRemove time.Duration
	rules := 0
	for i := 0; i < b.N; i++ {
		apply(&service.Table{})
		t0 := time.Now()
		base := resolve(scaleServices(n, backends, false), nil)
		tResolve += time.Since(t0)
		tFull += apply(base.Table)

		// One more Service: s<n>, with its own address.
		added := resolve(scaleServices(n+1, backends, false), &base.Allocations)
		vip := added.VIP[fmt.Sprintf("default/s%d", n)]
		t0 = time.Now()
		tAdd += apply(added.Table)
		for {
			var c net.Conn
			err := netns.Do(client.Netns, func() (err error) {
				c, err = net.DialTimeout("tcp4", fmt.Sprintf("%s:80", vip), 500*time.Millisecond)
				return
			})
			if err == nil {
				c.Close()
				break
			}
			if time.Since(t0) > 30*time.Second {
				b.Fatalf("no connection through %s after 30 s: %v", vip, err)
			}
		}
		tConnect += time.Since(t0)
		state, _ := p.Describe(ctx, spec)
		rules = countState(px, state["flip"])

		drained := resolve(scaleServices(n+1, backends, true), &added.Allocations)
		tDrain += apply(drained.Table)
		tRemove += apply(resolve(scaleServices(n, backends, true), &drained.Allocations).Table)
	}
	apply(&service.Table{})
	per := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
	b.ReportMetric(per(tResolve), "resolve-s")
	b.ReportMetric(per(tFull), "full-s")
	b.ReportMetric(per(tAdd), "add-s")
	b.ReportMetric(per(tConnect), "connect-s")
	b.ReportMetric(per(tDrain), "drain-s")
	b.ReportMetric(per(tRemove), "remove-s")
	b.ReportMetric(float64(rules), "rules")
}

// countState counts the proxy's rules in its Describe output: iptables
// rules ("-A" lines), the lines of nft list table (rules and map
// elements), or eBPF frontends and their backends.
func countState(px, state string) int {
	n := 0
	for _, line := range strings.Split(state, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case px == "iptables" && strings.HasPrefix(line, "-A "):
			n++
		case px == "nftables" && line != "" && line != "}" && !strings.HasPrefix(line, "type ") && !strings.HasPrefix(line, "flags "):
			n++
		case px == "ebpf" && strings.Contains(line, " -> "):
			_, bs, _ := strings.Cut(line, " -> ")
			n += 1 + len(strings.Fields(bs))
		}
	}
	return n
}
