package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/svcscenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// svcLab, svcDoc and sliceDoc are the service scenarios' lab and
// documents (internal/svcscenarios: the table the local cluster's test
// runs on the real kube-proxy too).
const svcLab = svcscenarios.Lab

var svcDoc, sliceDoc = svcscenarios.ServiceDoc, svcscenarios.SliceDoc

// testAlpha is the level of the probe's spread check in these tests:
// they make about 500 checks a run, so the CLI's 10⁻³ would fail a fair
// proxy in about four runs of ten; at 10⁻⁶, once in two thousand runs.
const testAlpha = 1e-6

// TestServiceScenarios runs every scenario on both proxies, each over a
// wire and over VXLAN (and each with the other netfilter policy
// datapath), and requires the probe to match the model for every client
// (the backends included: hairpin) and frontend.
func TestServiceScenarios(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	for _, c := range serviceLabs() {
		t.Run(c.name, func(t *testing.T) {
			spec := upServiceLab(t, c.name, c.dp, c.proxy, c.link, kind.Overrides{SocketLB: c.socketLB})
			for _, sc := range svcscenarios.Scenarios {
				runServiceScenario(t, spec.Name, sc, sc.Services, 4)
			}
		})
	}
}

// runServiceScenario applies a service scenario (its services as
// given: the scenario's, or their IPv6 form) and its policies on a lab,
// checks the model against the scenario, and probes every frontend it
// names (of family fam), and its node ports, against the model.
func runServiceScenario(t *testing.T, lab string, sc svcscenarios.Scenario, services string, fam int) {
	t.Helper()
	ctx := context.Background()
	svcs, sls, err := service.Parse([]byte(services), sc.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DeleteServices(ctx, lab, nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyServices(ctx, lab, svcs, sls); err != nil {
		t.Fatalf("%s: %v", sc.Name, err)
	}
	var pols []*policy.Policy
	if sc.Policies != "" {
		if pols, err = policy.Parse([]byte(sc.Policies), sc.Name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Replace(ctx, lab, pols); err != nil {
		t.Fatal(err)
	}
	m, err := ServiceModel(lab)
	if err != nil {
		t.Fatal(err)
	}
	if msg := sc.Want(m); msg != "" {
		t.Errorf("%s: %s", sc.Name, msg)
	}
	for _, ref := range sc.Probe {
		f, err := m.Resolved.Frontend(ref)
		if err != nil {
			t.Fatal(err)
		}
		if f.VIP.Is6() != (fam == 6) {
			t.Fatalf("%s: %s has cluster IP %s, want IPv%d", sc.Name, ref, f.VIP, fam)
		}
		for _, node := range append([]string{""}, sc.Nodes...) {
			res, err := probe.ProbeService(ctx, m, f, probe.ServiceOptions{Timeout: 300 * time.Millisecond, NodeHost: node})
			if err != nil {
				t.Fatal(err)
			}
			probe.CheckService(f, res, 0, testAlpha)
			for _, r := range res {
				for _, mm := range r.Mismatches {
					t.Errorf("%s: %s (node port on %q) from %s: %s", sc.Name, ref, node, r.From, mm)
				}
			}
		}
	}
}

func upServiceLab(t *testing.T, name, dp, proxy, link string, opts ...kind.Overrides) *topology.Spec {
	t.Helper()
	ov := topology.Overrides{Datapath: dp, Proxy: proxy}
	if len(opts) > 0 {
		ov.Options = opts[0]
	}
	spec, err := topology.Parse([]byte(fmt.Sprintf(svcLab, name, link)), "service lab", ov)
	if err != nil {
		t.Fatal(err)
	}
	if err := Up(context.Background(), spec, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Down(spec.Name, nil); err != nil {
			var nf *topology.NotFoundError
			if !errors.As(err, &nf) {
				t.Errorf("down: %v", err)
			}
		}
	})
	return spec
}

// TestServiceUpdatesUnderLoad changes a Service's backends while clients
// keep opening connections to it: once an apply returns, no new
// connection reaches a backend it removed; a TCP connection established
// to a removed backend before the apply keeps working (conntrack keeps its
// translation, as in a cluster).
func TestServiceUpdatesUnderLoad(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	ctx := context.Background()
	for _, p := range kind.ServingProxies() {
		proxy := string(p)
		t.Run(proxy, func(t *testing.T) {
			dp := string(p.Datapaths()[0])
			spec := upServiceLab(t, "t-svu-"+proxy[:3], dp, proxy, "wire")
			// Every backend listens on 8080 and answers each line with its
			// name, for as long as the connection lasts.
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			for _, id := range []string{"x/w1", "x/w2", "x/w3"} {
				ep, _ := spec.Endpoint(id)
				var ln net.Listener
				if err := netns.Do(ep.Netns, func() (err error) { ln, err = net.Listen("tcp4", ":8080"); return }); err != nil {
					t.Fatal(err)
				}
				lns = append(lns, ln)
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						go func() {
							defer c.Close()
							r := bufio.NewReader(c)
							for {
								if _, err := r.ReadString('\n'); err != nil {
									return
								}
								if _, err := c.Write([]byte(id + "\n")); err != nil {
									return
								}
							}
						}()
					}
				}()
			}
			all := sliceDoc("web", "  - {addresses: [10.0.192.2]}\n  - {addresses: [10.0.192.3]}\n  - {addresses: [10.0.191.2]}\n")
			apply := func(slice string) {
				t.Helper()
				svcs, sls, err := service.Parse([]byte(svcDoc("web", "  clusterIP: 10.96.0.80\n  ports: [{name: http, port: 80}]\n")+slice), "update")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ApplyServices(ctx, spec.Name, svcs, sls); err != nil {
					t.Fatal(err)
				}
			}
			apply(all)
			vip := "10.96.0.80:80"
			c1, _ := spec.Endpoint("y/c1")
			dial := func() (net.Conn, *bufio.Reader, string, error) {
				var c net.Conn
				if err := netns.Do(c1.Netns, func() (err error) { c, err = net.DialTimeout("tcp4", vip, time.Second); return }); err != nil {
					return nil, nil, "", err
				}
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				r := bufio.NewReader(c)
				if _, err := c.Write([]byte("who\n")); err != nil {
					c.Close()
					return nil, nil, "", err
				}
				id, err := r.ReadString('\n')
				if err != nil {
					c.Close()
					return nil, nil, "", err
				}
				return c, r, strings.TrimSpace(id), nil
			}
			// Hold a connection to x/w2, the backend that will go.
			var held net.Conn
			var heldR *bufio.Reader
			for i := 0; i < 200 && held == nil; i++ {
				c, r, id, err := dial()
				if err != nil {
					t.Fatal(err)
				}
				if id == "x/w2" {
					held, heldR = c, r
				} else {
					c.Close()
				}
			}
			if held == nil {
				t.Fatal("x/w2 never answered in 200 connections")
			}
			defer held.Close()
			// Clients connect in a loop. phase is 1 from the return of the
			// apply removing x/w2 until the apply adding it back starts:
			// a connection that began and ended in that window must not
			// reach x/w2.
			var phase atomic.Int32
			var stop atomic.Bool
			var mu sync.Mutex
			var late []string
			conns := 0
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						before := phase.Load()
						c, _, id, err := dial()
						if err != nil {
							continue
						}
						c.Close()
						after := phase.Load()
						mu.Lock()
						conns++
						if before == 1 && after == 1 && id == "x/w2" {
							late = append(late, id)
						}
						mu.Unlock()
					}
				}()
			}
			time.Sleep(200 * time.Millisecond)
			apply(sliceDoc("web", "  - {addresses: [10.0.192.2]}\n  - {addresses: [10.0.191.2]}\n")) // x/w2 removed
			phase.Store(1)
			time.Sleep(500 * time.Millisecond)
			phase.Store(2)
			apply(all) // and back, while the clients go on
			time.Sleep(200 * time.Millisecond)
			stop.Store(true)
			wg.Wait()
			if len(late) > 0 {
				t.Errorf("%d connections opened after x/w2 was removed reached it", len(late))
			}
			if conns < 20 {
				t.Errorf("only %d connections during the test", conns)
			}
			// The held connection still answers, from x/w2.
			_ = held.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := held.Write([]byte("still?\n")); err != nil {
				t.Fatalf("held connection: %v", err)
			}
			if id, err := heldR.ReadString('\n'); err != nil || strings.TrimSpace(id) != "x/w2" {
				t.Errorf("held connection to x/w2 after its removal: %q, %v", id, err)
			}
			t.Logf("%s: %d connections during the updates", proxy, conns)
		})
	}
}

// TestServiceAffinityExpires checks, on both proxies, that ClientIP
// affinity pins every client and lets go after its timeout (2 s): a
// client moved to another backend in one of three tries (if re-drawn at
// random, all five clients keep theirs with probability (1/3)^5 per try).
func TestServiceAffinityExpires(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	ctx := context.Background()
	for _, p := range kind.ServingProxies() {
		px := string(p)
		t.Run(px, func(t *testing.T) {
			dp := string(p.Datapaths()[0])
			spec := upServiceLab(t, "t-sva-"+px[:3], dp, px, "wire")
			svcs, _, err := service.Parse([]byte(svcDoc("aff", "  selector: {app: web}\n  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 2}}\n  ports: [{port: 80, targetPort: http}]\n")), "aff")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ApplyServices(ctx, spec.Name, svcs, nil); err != nil {
				t.Fatal(err)
			}
			m, err := ServiceModel(spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			f, _ := m.Resolved.Frontend("x/aff")
			o := probe.ServiceOptions{Timeout: 300 * time.Millisecond, Connections: 10}
			for try := 1; ; try++ {
				res, err := probe.ProbeService(ctx, m, f, o)
				if err != nil {
					t.Fatal(err)
				}
				if bad := probe.CheckService(f, res, o.Connections, testAlpha); bad > 0 {
					t.Fatalf("affinity: %+v", res)
				}
				mismatch, note, err := probe.CheckAffinityExpiry(ctx, m, f, o, res)
				if err != nil {
					t.Fatal(err)
				}
				if mismatch == "" && note == "" {
					break
				}
				if try == 3 {
					t.Fatalf("affinity never expired in three tries: %s%s", mismatch, note)
				}
			}
		})
	}
}

// TestServiceConnectHook: with the connect hook, a connect to a cluster IP
// or to a node port is judged after translation, on its backend, not on
// the Service's or the node's address (which no policy allows): a client
// whose egress allows only the backends' ports reaches both.
func TestServiceConnectHook(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	spec := upServiceLab(t, "t-svhook", "ebpf", "ebpf", "wire", kind.Overrides{ConnectHook: true})
	svcs, _, err := service.Parse([]byte(svcDoc("np", "  type: NodePort\n  selector: {app: web}\n  ports: [{port: 80, targetPort: http}]\n")), "np")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyServices(ctx, spec.Name, svcs, nil); err != nil {
		t.Fatal(err)
	}
	pols, err := policy.Parse([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: web-only, namespace: y}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n  egress: [{to: [{namespaceSelector: {matchLabels: {team: web}}}], ports: [{port: 8080}, {port: 8081}]}]\n"), "web-only")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Replace(ctx, spec.Name, pols); err != nil {
		t.Fatal(err)
	}
	f := nodePortBackends(t, spec)
	c1, _ := spec.Endpoint("y/c1")
	flap := spec.Host("flap")
	for _, target := range []string{fmt.Sprintf("%s:%d", f.VIP, f.Port), fmt.Sprintf("%s:%d", service.NodeAddress(flap), f.NodePort)} {
		for i := 0; i < 6; i++ {
			var c net.Conn
			err := netns.Do(c1.Netns, func() (err error) { c, err = net.DialTimeout("tcp4", target, 2*time.Second); return })
			if err != nil {
				t.Errorf("y/c1 -> %s (egress allows the backends' ports): %v", target, err)
				break
			}
			c.Close()
		}
	}
}

// nodePortBackends starts echo servers on the backends of the node-port
// Service x/np (x/w1 and x/w2 on 8080, x/w3 on 8081), closed when the
// test ends, and returns its frontend.
func nodePortBackends(t *testing.T, spec *topology.Spec) *service.Frontend {
	t.Helper()
	m, err := ServiceModel(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Resolved.Frontend("x/np")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"x/w1", "x/w2", "x/w3"} {
		ep, _ := spec.Endpoint(id)
		port := uint16(8080)
		if id == "x/w3" {
			port = 8081
		}
		srv, err := testutil.ListenEcho(ep.Netns, netip.AddrPortFrom(ep.IP, port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
	}
	return f
}
