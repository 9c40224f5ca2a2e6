package haproxy_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/l7proxy/deploy"
	"github.com/cnlab/cnlab/l7proxy/haproxy"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// TestHAProxyVerdicts puts HAProxy in the place of cnlab's proxy on the
// dual-stack scenario lab, on iptables, nftables and eBPF, with the first two L7
// scenarios' policies (a literal rule; method and path regexps, header
// matches, a Host regexp, rules of two peers): every hand-checked request,
// over IPv4 (and over IPv6 on eBPF), must get the status cnlab's proxy gives it (200 from the right server,
// 403 with DeniedBody, no connection), a denied request leaves the
// connection open for an allowed one, and once HAProxy is stopped it
// leaves no process, no nftables table and no file.
func TestHAProxyVerdicts(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft", "nftables")
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, haproxy.Binary, "haproxy")
	for _, dp := range []string{"iptables", "nftables", "ebpf"} {
		t.Run(dp, func(t *testing.T) {
			spec, err := topology.Parse([]byte(scenarios.LabFor(4, 6)), "dual-stack scenario lab", topology.Overrides{Name: "t-hap-" + dp[:3], Datapath: dp})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := lab.Up(ctx, spec, lab.UpOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := lab.Down(spec.Name, nil); err != nil {
					t.Errorf("down: %v", err)
				}
			})
			srv, err := probe.ListenHTTP(spec, scenarios.L7Port)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			for _, sc := range scenarios.L7[:2] {
				pols, err := policy.Parse([]byte(sc.Policies), sc.Name)
				if err != nil {
					t.Fatal(err)
				}
				if err := haproxy.StopAll(ctx, spec); err != nil {
					t.Fatal(err)
				}
				ch, err := lab.Replace(ctx, spec.Name, pols)
				if err != nil {
					t.Fatalf("%s: %v", sc.Name, err)
				}
				var pids []int
				for _, h := range spec.Hosts {
					cfg := deploy.Build(spec, h.Name, ch.Compiled)
					if cfg == nil {
						continue
					}
					pid, err := haproxy.Start(ctx, spec, h.Name, cfg, dp == "ebpf")
					if err != nil {
						t.Fatalf("%s: %v", sc.Name, err)
					}
					if l7proxy.Pid(spec.Name, h.Name) != 0 {
						t.Errorf("%s: cnlab's proxy of host %s still runs beside HAProxy", sc.Name, h.Name)
					}
					pids = append(pids, pid)
				}
				checkCells(t, spec, srv, sc, 4)
				if dp == "ebpf" { // HAProxy 2.6 reads no IPv6 original destination after a REDIRECT (docs/l7.md)
					checkCells(t, spec, srv, sc, 6)
				}
				if sc.Name == scenarios.L7[0].Name {
					checkKeepAlive(t, spec)
				}
				if err := haproxy.StopAll(ctx, spec); err != nil {
					t.Fatal(err)
				}
				checkNothingLeft(t, spec, pids)
			}
		})
	}
}

// checkCells sends each hand-checked request of a scenario on a
// connection of its own, over family fam.
func checkCells(t *testing.T, spec *topology.Spec, srv *probe.HTTPServers, sc scenarios.L7Scenario, fam int) {
	t.Helper()
	for _, c := range sc.Expect {
		from, err1 := spec.Endpoint(c.From)
		to, err2 := spec.Endpoint(c.To)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		nonce := probe.Nonce()
		timeout := 2 * time.Second
		if c.Status == 0 {
			timeout = 500 * time.Millisecond
		}
		dst, _ := to.Addr(fam)
		res := probe.SendHTTP(context.Background(), from.Netns, netip.AddrPortFrom(dst, scenarios.L7Port),
			[]probe.HTTPRequest{{Method: c.Method, Path: c.Path, Header: c.Header}}, []string{nonce}, timeout)[0]
		got := srv.Received(nonce)
		switch {
		case res.Status != c.Status:
			t.Errorf("%s: IPv%d %s -> %s %s %s %v: status %d (%v, %q), want %d", sc.Name, fam, c.From, c.To, c.Method, c.Path, c.Header, res.Status, res.Err, res.Body, c.Status)
		case c.Status == 403 && c.Method != "HEAD" && res.Body != l7proxy.DeniedBody: // an answer to HEAD has no body
			t.Errorf("%s: %s -> %s %s %s: 403 with body %q, want %q", sc.Name, c.From, c.To, c.Method, c.Path, res.Body, l7proxy.DeniedBody)
		case c.Status == 200 && got != c.To:
			t.Errorf("%s: %s -> %s %s %s: received by %q", sc.Name, c.From, c.To, c.Method, c.Path, got)
		case c.Status != 200 && got != "":
			t.Errorf("%s: %s -> %s %s %s: denied, but %s received it", sc.Name, c.From, c.To, c.Method, c.Path, got)
		}
	}
}

// checkKeepAlive: a denied request and then an allowed one on one
// connection, as cnlab's proxy keeps it open after a 403.
func checkKeepAlive(t *testing.T, spec *topology.Spec) {
	t.Helper()
	from, _ := spec.Endpoint("x/c")
	to, _ := spec.Endpoint("x/a")
	reqs := []probe.HTTPRequest{{Method: "GET", Path: "/private"}, {Method: "GET", Path: "/public"}, {Method: "POST", Path: "/public"}}
	res := probe.SendHTTP(context.Background(), from.Netns, netip.AddrPortFrom(to.IP, scenarios.L7Port), reqs,
		[]string{probe.Nonce(), probe.Nonce(), probe.Nonce()}, 2*time.Second)
	for i, want := range []int{403, 200, 403} {
		if res[i].Status != want {
			t.Errorf("keep-alive request %d (%s %s): status %d (%v), want %d", i+1, reqs[i].Method, reqs[i].Path, res[i].Status, res[i].Err, want)
		}
	}
}

// checkNothingLeft: no HAProxy process, no nftables table, no file.
func checkNothingLeft(t *testing.T, spec *topology.Spec, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("HAProxy %d still runs after Stop", pid)
		}
	}
	if out, _ := exec.Command("pgrep", "-f", "haproxy -D -f "+haproxy.Dir(spec.Name, "")).Output(); len(out) > 0 {
		t.Errorf("haproxy processes of the lab after Stop: %s", out)
	}
	for _, h := range spec.Hosts {
		out, err := netns.Run(context.Background(), h.Netns, nil, "nft", "list", "tables")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), haproxy.Table) {
			t.Errorf("host %s keeps table %s after Stop", h.Name, haproxy.Table)
		}
		if _, err := os.Stat(haproxy.Dir(spec.Name, h.Name)); !os.IsNotExist(err) {
			t.Errorf("host %s keeps %s after Stop (%v)", h.Name, haproxy.Dir(spec.Name, h.Name), err)
		}
	}
}

// running reports whether a process runs: not gone, not a zombie its
// new parent has yet to reap.
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
