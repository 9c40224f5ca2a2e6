package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// churnLab: a server, a client its policy allows on port 80 and one it
// does not, on one host.
const churnLab = `name: %s
hosts: [{name: flip, podCIDR: 10.0.192.0/24}]
endpoints:
  - {name: s, host: flip, labels: {app: server, tier: back}}
  - {name: a, host: flip, labels: {app: ok}}
  - {name: d, host: flip, labels: {app: bad}}
`

// churnBase allows a to reach s on port 80 and nothing else; churnVariants
// are the changes applied under load, each keeping that verdict: an
// equivalent base with another selector, extra policies on other ports, an
// egress isolation of s (its replies are established traffic).
var churnBase = []string{`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: base, namespace: default}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchLabels: {app: ok}}}], ports: [{port: 80, protocol: TCP}]}]
`, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: base, namespace: default}
spec:
  podSelector: {matchLabels: {tier: back}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {matchExpressions: [{key: app, operator: In, values: [ok]}]}}], ports: [{port: 80, protocol: TCP}]}]
`}

var churnExtras = []string{`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: extra-ports, namespace: default}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Ingress]
  ingress: [{from: [{podSelector: {}}], ports: [{port: 81, protocol: TCP}, {port: 82, protocol: UDP}]}]
`, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: s-egress, namespace: default}
spec:
  podSelector: {matchLabels: {app: server}}
  policyTypes: [Egress]
`, `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: deny-d-other, namespace: default}
spec:
  endpointSelector: {matchLabels: {app: server}}
  ingressDeny: [{fromEndpoints: [{matchLabels: {app: bad}}], toPorts: [{ports: [{port: "443", protocol: TCP}]}]}]
`}

// BenchmarkPolicyChurn changes a lab's policies several times a second
// while clients load it, on each datapath, and counts what must never
// happen: a denied connection that got through, an allowed established
// connection cut, and (to measure) allowed new connections that failed.
// Reproduce (about 70 s per datapath):
//
//	CNLAB_CHURN_SECONDS=60 go test -run '^$' -bench PolicyChurn -benchtime 1x ./lab
func BenchmarkPolicyChurn(b *testing.B) {
	secs := 10
	if v := os.Getenv("CNLAB_CHURN_SECONDS"); v != "" {
		fmt.Sscan(v, &secs)
	}
	for _, dp := range []string{"iptables", "nftables", "ebpf"} {
		b.Run(dp, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := churn(b, dp, time.Duration(secs)*time.Second)
				b.ReportMetric(float64(r.updates), "updates")
				b.ReportMetric(float64(r.deniedTried), "denied-tried")
				b.ReportMetric(float64(r.deniedPassed), "denied-passed")
				b.ReportMetric(float64(r.allowedTried), "allowed-tried")
				b.ReportMetric(float64(r.allowedFailed), "allowed-failed")
				b.ReportMetric(float64(r.heldExchanges), "held-exchanges")
				b.ReportMetric(float64(r.heldCut), "held-cut")
			}
		})
	}
}

type churnResult struct {
	updates                     int
	deniedTried, deniedPassed   int64
	allowedTried, allowedFailed int64
	heldExchanges, heldCut      int64
	updatesNow                  int64 // updates done so far, for the log
}

func churn(b *testing.B, dp string, d time.Duration) churnResult {
	testutil.RequireRoot(b)
	testutil.RequireTool(b, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(b, "nft", "nftables")
	name := "t-churn-" + short[dp]
	spec, err := topology.Parse([]byte(fmt.Sprintf(churnLab, name)), "churn lab", topology.Overrides{Datapath: dp})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := Up(ctx, spec, UpOptions{}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := Down(spec.Name, nil); err != nil {
			b.Error(err)
		}
	}()
	parse := func(docs ...string) []*policy.Policy {
		var out []*policy.Policy
		for _, doc := range docs {
			ps, err := policy.Parse([]byte(doc), "churn.yaml")
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, ps...)
		}
		return out
	}
	if _, err := Replace(ctx, spec.Name, parse(churnBase[0])); err != nil {
		b.Fatal(err)
	}
	s, _ := spec.Endpoint("s")
	a, _ := spec.Endpoint("a")
	dn, _ := spec.Endpoint("d")
	dst := netip.AddrPortFrom(s.IP, 80)
	srv, err := testutil.ListenEchoFor(s.Netns, dst, d+time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	dial := func(ns string, timeout time.Duration) (net.Conn, error) {
		var c net.Conn
		err := netns.Do(ns, func() error {
			var err error
			c, err = net.DialTimeout("tcp", dst.String(), timeout)
			return err
		})
		return c, err
	}
	exchange := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte{'x'}); err != nil {
			return err
		}
		var buf [1]byte
		_, err := c.Read(buf[:])
		return err
	}
	var r churnResult
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					f()
				}
			}
		}()
	}
	// Allowed new connections, one after the other (tcp-crr-like).
	loop(func() {
		atomic.AddInt64(&r.allowedTried, 1)
		c, err := dial(a.Netns, time.Second)
		if err == nil {
			err = exchange(c)
			// A reset instead of a FIN: no TIME_WAIT, so the client's
			// ephemeral ports last the run (tcp-crr tools close from
			// the server for the same reason).
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
		if err != nil && atomic.AddInt64(&r.allowedFailed, 1) <= 10 {
			b.Logf("%s: allowed connection failed after update %d: %v", dp, atomic.LoadInt64(&r.updatesNow), err)
		}
	})
	// Denied new connections, four at a time (each waits 200 ms for a
	// SYN-ACK that should never come): any that connects is a breach.
	for range 4 {
		loop(func() {
			atomic.AddInt64(&r.deniedTried, 1)
			c, err := dial(dn.Netns, 200*time.Millisecond)
			if err == nil {
				if atomic.AddInt64(&r.deniedPassed, 1) <= 10 {
					b.Logf("%s: denied connection got through after update %d", dp, atomic.LoadInt64(&r.updatesNow))
				}
				_ = c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		})
	}
	// An allowed connection held open, exchanging every 20 ms.
	held, err := dial(a.Netns, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer held.Close()
	var cut atomic.Bool
	loop(func() {
		if cut.Load() {
			time.Sleep(20 * time.Millisecond)
			return
		}
		if err := exchange(held); err != nil {
			b.Logf("%s: held connection cut after update %d: %v", dp, atomic.LoadInt64(&r.updatesNow), err)
			atomic.AddInt64(&r.heldCut, 1)
			cut.Store(true)
			return
		}
		atomic.AddInt64(&r.heldExchanges, 1)
		time.Sleep(20 * time.Millisecond)
	})
	// Policy changes, five a second: the base with either selector, with a
	// changing subset of the extras.
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		docs := []string{churnBase[i%2]}
		for k, e := range churnExtras {
			if (i>>k)&1 == 1 {
				docs = append(docs, e)
			}
		}
		if _, err := Replace(ctx, spec.Name, parse(docs...)); err != nil {
			b.Fatalf("update %d: %v", i, err)
		}
		r.updates++
		atomic.StoreInt64(&r.updatesNow, int64(r.updates))
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	held.Close() // before the server waits for its connections to end
	return r
}
