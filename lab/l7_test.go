package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/l7"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// applyL7Scenario replaces a lab's policies with an L7 scenario's and
// returns the model and what the lab compiled.
func applyL7Scenario(t *testing.T, spec *topology.Spec, sc scenarios.L7Scenario) (*policy.Model, *policy.Compiled) {
	t.Helper()
	ctx := context.Background()
	if _, err := Delete(ctx, spec.Name, nil, true, ""); err != nil {
		t.Fatalf("%s: delete: %v", sc.Name, err)
	}
	pols, err := policy.Parse([]byte(sc.Policies), sc.Name)
	if err != nil {
		t.Fatalf("%s: %v", sc.Name, err)
	}
	ch, err := Apply(ctx, spec.Name, pols)
	if err != nil {
		t.Fatalf("%s: apply: %v", sc.Name, err)
	}
	m, err := policy.NewModel(spec, pols)
	if err != nil {
		t.Fatal(err)
	}
	return m, ch.Compiled
}

// TestL7Scenarios applies every L7 scenario on each datapath that
// supports L7 rules (eBPF with both host routings), on a two-host lab (a
// wire, and a VXLAN overlay for nftables and eBPF), and sends from every endpoint to
// every endpoint with an L7 port, on one keep-alive connection per pair,
// the requests generated from the rules (a match and near misses of each)
// and the hand-checked ones: every status must be the model's (0 no
// connection, 403 with Cilium's body, 200 from the right server), a
// request the model denies must never reach a server and one it allows
// must; the hand-checked cells are sent too, each on its own connection.
// Then the lab goes down and its proxies with it.
func TestL7Scenarios(t *testing.T) {
	// The overlay only changes the path: nftables once, and eBPF, whose
	// program on the VXLAN device hands connections to the proxy.
	runs := []struct{ dp, link string }{{"nftables", "vxlan"}, {"ebpf", "vxlan"}}
	for _, dp := range datapaths() { // every datapath that enforces every policy redirects L7 ports to the proxy
		runs = append(runs, struct{ dp, link string }{dp, "wire"})
	}
	for _, run := range runs {
		dp := run.dp
		t.Run(dp+"-"+run.link, func(t *testing.T) {
			spec := scenarioLab(t, "t-l7-"+shortName(dp)+"-"+run.link[:2], dp, run.link)
			srv, err := probe.ListenHTTP(spec, scenarios.L7Port)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			ebpf := strings.HasPrefix(dp, "ebpf")
			if ebpf && proxyRule(t, spec) {
				t.Error("a host has the L7 proxy's ip rule before any L7 policy (every route lookup would pay for it)")
			}
			for _, sc := range scenarios.L7 {
				m, c := applyL7Scenario(t, spec, sc)
				checkL7(t, sc, spec, m, c, srv, 0)
			}
			if ebpf && !proxyRule(t, spec) {
				t.Error("no host has the L7 proxy's ip rule after L7 policies")
			}
			var pids []int
			for _, h := range spec.Hosts {
				if pid := l7proxy.Pid(spec.Name, h.Name); pid != 0 {
					pids = append(pids, pid)
				}
			}
			if len(pids) == 0 {
				t.Fatal("no L7 proxy runs on any host")
			}
			if st, err := ReadState(spec.Name); err != nil || len(st.L7Proxies) != len(pids) {
				t.Errorf("ledger: %v %v, want %d proxies recorded", st.L7Proxies, err, len(pids))
			}
			srv.Close()
			if err := Down(spec.Name, nil); err != nil {
				t.Fatal(err)
			}
			for _, pid := range pids {
				if syscall.Kill(pid, 0) == nil {
					t.Errorf("L7 proxy %d still runs after down", pid)
				}
			}
		})
	}
}

// TestL7ScenariosDualStack runs the L7 scenarios over IPv6 on a
// dual-stack lab (a wire) on iptables, nftables and eBPF: every request
// sent to the endpoints' IPv6 addresses must get the model's verdict over
// IPv6, as TestL7Scenarios checks IPv4's (the same path, from the
// destination's host and from the other). An IPv6-only lab on eBPF with
// legacy host routing (its own hand-over through the bridge) runs them
// too, and probe --http over both families once per lab. About 40 s.
func TestL7ScenariosDualStack(t *testing.T) {
	for _, run := range []struct {
		dp   string
		fams []int // the lab's
		send []int // the families the requests go over
	}{{"iptables", []int{4, 6}, []int{6}}, {"nftables", []int{4, 6}, []int{6}}, {"ebpf", []int{4, 6}, []int{6}}, {"ebpf-legacy", []int{6}, []int{6}}} {
		name := "ds"
		if len(run.fams) == 1 {
			name = "v6"
		}
		t.Run(run.dp+"-"+name, func(t *testing.T) {
			spec := familyLab(t, "t-l7-"+shortName(run.dp)+"-"+name, run.dp, run.fams...)
			srv, err := probe.ListenHTTP(spec, scenarios.L7Port)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { srv.Close() }() // srv is started again below
			for _, sc := range scenarios.L7 {
				m, c := applyL7Scenario(t, spec, sc)
				for _, fam := range run.send {
					checkL7(t, sc, spec, m, c, srv, fam)
				}
				if sc.Name == scenarios.L7[0].Name {
					srv.Close() // the probe's servers take the port
					checkProbeHTTPFamilies(t, spec, m)
					if srv, err = probe.ListenHTTP(spec, scenarios.L7Port); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// checkProbeHTTPFamilies runs probe --http over every family of the lab:
// one cell per pair and family, each the model's over its family.
func checkProbeHTTPFamilies(t *testing.T, spec *topology.Spec, m *policy.Model) {
	t.Helper()
	req := probe.HTTPRequest{Method: "GET", Path: "/public"}
	cells, err := probe.RunHTTP(context.Background(), spec, scenarios.L7Port, req, probe.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := len(spec.Endpoints) * (len(spec.Endpoints) - 1)
	seen := map[int]int{}
	for _, c := range cells {
		seen[c.Family]++
	}
	for _, fam := range spec.Families() {
		if seen[fam] != n {
			t.Errorf("probe --http: %d IPv%d cells, want %d", seen[fam], fam, n)
		}
	}
	for _, c := range probe.ExpectHTTP(spec, m, cells, req) {
		t.Errorf("probe --http: IPv%d %s -> %s: status %d, expected %d (reached %v)", c.Family, c.From, c.To, *c.Status, *c.ExpectedStatus, c.Reached)
	}
}

func famText(fam int) string {
	if fam == 0 {
		return ""
	}
	return fmt.Sprintf("IPv%d ", fam)
}

// proxyRule reports whether a host of the lab has the eBPF datapath's
// rule for what it hands to the L7 proxy (table 2004).
func proxyRule(t *testing.T, spec *topology.Spec) bool {
	t.Helper()
	for _, h := range spec.Hosts {
		out, err := netns.Run(context.Background(), h.Netns, nil, "ip", "rule", "list", "table", "2004")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "fwmark 0x200/0xf00") {
			return true
		}
	}
	return false
}

// checkL7 sends the scenario's requests over family fam (4 or 6; 0: the
// endpoints' primary addresses) and checks each against the model's
// verdict over that family.
func checkL7(t *testing.T, sc scenarios.L7Scenario, spec *topology.Spec, m *policy.Model, c *policy.Compiled, srv *probe.HTTPServers, fam int) {
	t.Helper()
	var rules []l7.Rule
	for _, h := range c.HTTP {
		rules = append(rules, h.Rules...)
	}
	gen := scenarios.Requests(rules)
	type seq struct {
		src, dst *topology.Endpoint
		reqs     []probe.HTTPRequest
	}
	var seqs []seq
	for i := range spec.Endpoints {
		dst := &spec.Endpoints[i]
		if len(c.L7Ports(c.IdentityOfIP(dst.IP))) == 0 {
			continue
		}
		for j := range spec.Endpoints {
			if i == j {
				continue
			}
			s := seq{src: &spec.Endpoints[j], dst: dst}
			for _, r := range gen {
				s.reqs = append(s.reqs, probe.HTTPRequest{Method: r.Method, Path: r.Path, Header: r.Header})
			}
			seqs = append(seqs, s)
		}
	}
	for _, cell := range sc.Expect {
		src, _ := spec.Endpoint(cell.From)
		dst, _ := spec.Endpoint(cell.To)
		seqs = append(seqs, seq{src: src, dst: dst, reqs: []probe.HTTPRequest{{Method: cell.Method, Path: cell.Path, Header: cell.Header}}})
	}
	var mu sync.Mutex
	var bad []string
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, s := range seqs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			dstIP := s.dst.IP
			if fam != 0 {
				dstIP, _ = s.dst.Addr(fam)
			}
			dst := netip.AddrPortFrom(dstIP, scenarios.L7Port)
			nonces := make([]string, len(s.reqs))
			for i := range nonces {
				nonces[i] = probe.Nonce()
			}
			res := probe.SendHTTP(context.Background(), s.src.Netns, dst, s.reqs, nonces, time.Second)
			for i, r := range s.reqs {
				want := m.HTTPVerdict(s.src, s.dst, scenarios.L7Port, r.Model(dst.String())).Status
				if fam != 0 {
					v, _ := m.HTTPVerdictFamily(s.src, s.dst, fam, scenarios.L7Port, r.Model(dst.String()))
					want = v.Status
				}
				got, reached := res[i].Status, srv.Received(nonces[i])
				var why []string
				if got != want {
					why = append(why, fmt.Sprintf("status %d, want %d (%v)", got, want, res[i].Err))
				}
				if (want == 200) != (reached != "") {
					why = append(why, fmt.Sprintf("reached server %q", reached))
				}
				if got == 403 && r.Method != "HEAD" && res[i].Body != l7proxy.DeniedBody { // a HEAD answer has no body
					why = append(why, fmt.Sprintf("403 body %q", res[i].Body))
				}
				if got == 200 && r.Method != "HEAD" && !strings.HasPrefix(res[i].Body, fmt.Sprintf("%s %s %s", s.dst.ID(), r.Method, r.Path)) {
					why = append(why, fmt.Sprintf("body %q", res[i].Body))
				}
				if len(why) > 0 {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s%s -> %s request %d/%d %s %s %v: %s", famText(fam), s.src.ID(), s.dst.ID(), i+1, len(s.reqs), r.Method, r.Path, r.Header, strings.Join(why, "; ")))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for i, b := range bad {
		if i == 10 {
			t.Errorf("%s: ... %d more", sc.Name, len(bad)-10)
			break
		}
		t.Errorf("%s: %s", sc.Name, b)
	}
	t.Logf("%s: %d request sequences, %d requests generated per L7 pair", sc.Name, len(seqs), len(gen))
}

// TestL7PortReuse: the proxy closes a connection without keep-alive
// first, and a client may open the next one from the same port at once
// (ab does, from a busy port range): the connection must go to the proxy
// without a lost SYN (a retransmission a second later), on every datapath,
// from the same host and from the other. On eBPF a TIME_WAIT socket of
// the proxy's on that tuple would swallow the SYN (bpf/cnlab.c, to_proxy).
func TestL7PortReuse(t *testing.T) {
	for _, dp := range []string{"nftables", "ebpf", "ebpf-legacy"} {
		t.Run(dp, func(t *testing.T) {
			spec := getPublicLab(t, "t-l7-reuse-"+short[dp], dp)
			to, err := spec.Endpoint("x/a")
			if err != nil {
				t.Fatal(err)
			}
			for _, from := range []string{"c", "b"} { // same host as x/a, the other host
				src, err := spec.Endpoint("x/" + from)
				if err != nil {
					t.Fatal(err)
				}
				before := synRetrans(t, src.Netns)
				for i := range 4 {
					status, err := closeFirst(src.Netns, netip.AddrPortFrom(to.IP, scenarios.L7Port), 41000, "/private", 2*time.Second)
					if err != nil || status != 403 {
						t.Fatalf("x/%s -> x/a, connection %d from port 41000: status %d, %v", from, i+1, status, err)
					}
				}
				// A SYN that met an old connection's socket is answered
				// with an ACK of that connection, reset, and sent again
				// (2 jiffies later at best, a second at worst).
				if n := synRetrans(t, src.Netns) - before; n != 0 {
					t.Errorf("x/%s -> x/a: %d SYNs sent again for 4 connections from one port", from, n)
				}
			}
		})
	}
}

// TestL7ThroughService: on eBPF a Service's translation comes before
// policy, so a connection through a cluster IP to an L7 port goes to the
// proxy like one to the endpoint: GET /public 200, GET /private 403 from
// the proxy, from the same host and from the other. Two cases fail
// closed, with no connection (docs/l7.md): with legacy host routing, a
// client on the backend's host (not handed over; the backend's program
// drops it); and a client reaching its own Service (hairpin: its source
// rewritten to the host's), never a verdict on the host's identity.
func TestL7ThroughService(t *testing.T) {
	for _, dp := range []string{"ebpf", "ebpf-legacy"} {
		t.Run(dp, func(t *testing.T) {
			spec := getPublicLab(t, "t-l7-svc-"+short[dp], dp)
			svcs, sls, err := service.Parse([]byte(svcDoc("web", "  clusterIP: 10.96.0.80\n  selector: {app: web}\n  ports: [{port: 80}]\n")), "web.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ApplyServices(context.Background(), spec.Name, svcs, sls); err != nil {
				t.Fatal(err)
			}
			vip := netip.MustParseAddrPort("10.96.0.80:80")
			same := []int{200, 403} // x/c, on x/a's host
			for _, c := range []struct {
				from, path string
				status     int
			}{{"x/c", "/public", same[0]}, {"x/c", "/private", same[1]}, {"x/b", "/public", 200}, {"x/b", "/private", 403}, {"x/a", "/public", 0}} {
				src, err := spec.Endpoint(c.from)
				if err != nil {
					t.Fatal(err)
				}
				status, err := closeFirst(src.Netns, vip, 0, c.path, time.Second)
				if status != c.status || (c.status != 0 && err != nil) {
					t.Errorf("%s -> web (%s) GET %s: status %d (%v), want %d", c.from, vip, c.path, status, err, c.status)
				}
			}
		})
	}
}

// getPublicLab brings up the scenario lab over a wire with the probe's
// HTTP servers on the L7 port of every endpoint, and applies the first L7
// scenario (x's web endpoints: GET /public from namespace x).
func getPublicLab(t *testing.T, name, dp string) *topology.Spec {
	t.Helper()
	spec, _ := publicLab(t, name, dp)
	return spec
}

// publicLab is getPublicLab, with the probe's servers.
func publicLab(t *testing.T, name, dp string) (*topology.Spec, *probe.HTTPServers) {
	t.Helper()
	spec := scenarioLab(t, name, dp, "wire")
	srv, err := probe.ListenHTTP(spec, scenarios.L7Port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close) // before the lab's own cleanup: registered after it
	pols, err := policy.Parse([]byte(scenarios.L7[0].Policies), "l7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(context.Background(), spec.Name, pols); err != nil {
		t.Fatal(err)
	}
	return spec, srv
}

// synRetrans reads TcpExt TCPSynRetrans of a namespace.
func synRetrans(t *testing.T, ns string) int {
	t.Helper()
	n := -1
	err := netns.Do(ns, func() error {
		data, err := os.ReadFile("/proc/thread-self/net/netstat")
		if err != nil {
			return err
		}
		lines := strings.Split(string(data), "\n")
		for i := 0; i+1 < len(lines); i += 2 {
			names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			for j := range names {
				if names[0] == "TcpExt:" && names[j] == "TCPSynRetrans" && j < len(values) {
					n, err = strconv.Atoi(values[j])
					return err
				}
			}
		}
		return errors.New("no TcpExt TCPSynRetrans")
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// closeFirst sends GET path with Connection: close from port lport (any
// when 0) in namespace ns (giving up on a connection after timeout), reads the answer to the server's close, and
// returns its status.
func closeFirst(ns string, dst netip.AddrPort, lport int, path string, timeout time.Duration) (int, error) {
	status := 0
	err := netns.Do(ns, func() error {
		d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{Port: lport},
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
				})
				return errors.Join(err, serr)
			}}
		c, err := d.Dial("tcp4", dst.String())
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path); err != nil {
			return err
		}
		body, err := io.ReadAll(c) // to the server's FIN: it closed first
		if err != nil {
			return err
		}
		_, err = fmt.Sscanf(string(body), "HTTP/1.1 %d", &status)
		return err
	})
	return status, err
}

// TestL7UpdatesUnderLoad switches, over and over, between policy sets
// while clients send requests on fresh connections: a request that every
// set in effect at some moment of its life denies (at L7 or L3/L4) must
// never pass, and one they all allow must never fail, whatever the moment
// of the switch (the proxies get the new rules, keeping the old ones of
// ports that stop being L7 ports, before the datapath switches, and the
// datapath orders its commits: docs/l7.md).
func TestL7UpdatesUnderLoad(t *testing.T) {
	for _, dp := range enforcingKinds() {
		t.Run(dp, func(t *testing.T) {
			spec := scenarioLab(t, "t-l7u-"+shortName(dp), dp, "wire")
			ctx := context.Background()
			srv, err := probe.ListenHTTP(spec, scenarios.L7Port)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			head := "apiVersion: cilium.io/v2\nkind: CiliumNetworkPolicy\nmetadata: {name: web, namespace: x}\nspec:\n  endpointSelector:\n    matchLabels: {app: web}\n  ingress:\n"
			l7 := func(paths ...string) string {
				y := head + "  - fromEndpoints:\n    - {}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n      rules:\n        http:\n"
				for _, p := range paths {
					y += "        - {method: GET, path: " + p + "}\n"
				}
				return y
			}
			// Three sets: L7 /public; L7 /public and /other; x/b allowed
			// everything at L3/L4 (no L7 port). x/b's GET /public passes in
			// all three; x/c's GET /private in none (403, 403, no
			// connection).
			sets := []string{l7("/public"), l7("/public", "/other"), head + "  - fromEndpoints:\n    - matchLabels: {pod: b}\n"}
			var models []*policy.Model
			var parsed [][]*policy.Policy
			for _, y := range sets {
				pols, err := policy.Parse([]byte(y), "set.yaml")
				if err != nil {
					t.Fatal(err)
				}
				m, err := policy.NewModel(spec, pols)
				if err != nil {
					t.Fatal(err)
				}
				parsed, models = append(parsed, pols), append(models, m)
			}
			// switches[i]: set switches[i].to is being applied from start;
			// the set before is switches[i-1].to.
			type sw struct {
				to         int
				start, end time.Time // of its apply (end zero while under way)
			}
			var mu sync.Mutex
			switches := []sw{{0, time.Now(), time.Time{}}}
			if _, err := Replace(ctx, spec.Name, parsed[0]); err != nil {
				t.Fatal(err)
			}
			switches[0].end = time.Now()
			// inEffect returns the sets that judged some moment of [from, to].
			inEffect := func(from, to time.Time) []int {
				mu.Lock()
				defer mu.Unlock()
				var out []int
				for i, s := range switches {
					// A set may judge from the start of its apply until the
					// end of the next one.
					end := time.Now()
					if i+1 < len(switches) && !switches[i+1].end.IsZero() {
						end = switches[i+1].end
					}
					if s.start.Before(to) && !end.Before(from) {
						out = append(out, s.to)
					}
				}
				return out
			}
			dst, _ := spec.Endpoint("x/a")
			addr := netip.AddrPortFrom(dst.IP, scenarios.L7Port)
			stop := make(chan struct{})
			var bad []string
			counts := map[string]int{}
			var wg sync.WaitGroup
			for _, c := range []struct{ from, path string }{{"x/c", "/private"}, {"x/b", "/public"}, {"x/b", "/private"}, {"x/c", "/public"}} {
				src, _ := spec.Endpoint(c.from)
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := probe.HTTPRequest{Method: "GET", Path: c.path}
					for {
						select {
						case <-stop:
							return
						default:
						}
						start := time.Now()
						res := probe.SendHTTP(ctx, src.Netns, addr, []probe.HTTPRequest{req}, []string{probe.Nonce()}, 3*time.Second)[0]
						allAllow, allDeny := true, true
						sets := inEffect(start, time.Now())
						for _, k := range sets {
							st := models[k].HTTPVerdict(src, dst, scenarios.L7Port, req.Model(addr.String())).Status
							allAllow = allAllow && st == 200
							allDeny = allDeny && st != 200
						}
						mu.Lock()
						counts[c.from+" "+c.path]++
						if allAllow && res.Status != 200 || allDeny && res.Status == 200 {
							bad = append(bad, fmt.Sprintf("%s GET %s: %d (%v) under sets %v", c.from, c.path, res.Status, res.Err, sets))
						}
						mu.Unlock()
					}
				}()
			}
			order := []int{1, 0, 1, 2, 0, 2, 1, 2, 0, 1, 0, 2}
			for _, k := range order {
				time.Sleep(100 * time.Millisecond)
				mu.Lock()
				switches = append(switches, sw{k, time.Now(), time.Time{}})
				mu.Unlock()
				if _, err := Replace(ctx, spec.Name, parsed[k]); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				switches[len(switches)-1].end = time.Now()
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
			close(stop)
			wg.Wait()
			for k, n := range counts {
				if n < 10 {
					t.Errorf("only %d requests of %s during the switches", n, k)
				}
			}
			for i, b := range bad {
				if i == 10 {
					t.Errorf("... %d more", len(bad)-10)
					break
				}
				t.Error(b)
			}
			t.Logf("requests during %d switches: %v", len(order), counts)
		})
	}
}
