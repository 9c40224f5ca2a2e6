package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/vishvananda/netlink"
)

// TestChainFunctionsInEveryHop builds chains of two hops with a firewall
// (stateful and not, both iptables backends) and a shaper, checks that
// traffic still crosses them, and that each hop holds its rules and qdisc.
func TestChainFunctionsInEveryHop(t *testing.T) {
	cases := []struct {
		name, fns string
		stateful  bool
		backend   string
		devs      []string // shaped
		length    int
	}{
		{"stateful", "[{kind: firewall, rules: 5, stateful: true}, {kind: shaper, rate: 10mbit, direction: both}]", true, BackendLegacy, []string{"eth0", "eth1"}, 2},
		{"stateless", "[{kind: shaper, rate: 1tbit}, {kind: firewall, rules: 5, backend: nft}]", false, BackendNFT, []string{"eth1"}, 2},
		{"direct", "[{kind: firewall, rules: 5, stateful: true}, {kind: shaper, rate: 1tbit, direction: all}]", true, BackendLegacy, nil, 0},
		{"all", "[{kind: shaper, rate: 1tbit, direction: all}, {kind: firewall, rules: 5}]", false, BackendLegacy, []string{"eth0", "eth1"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testutil.RequireRoot(t)
			testutil.RequireTool(t, iptablesRestore(tc.backend), "iptables")
			yaml := fmt.Sprintf("name: t-nf-%s\nchain:\n  length: %d\n  functions: %s\n", tc.name, tc.length, tc.fns)
			s, err := Parse([]byte(yaml), "t.yaml", Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			upForTest(t, s)
			checkAllPairs(t, s)
			client, _ := s.Endpoint("client")
			server, _ := s.Endpoint("server")
			if out, err := netns.Run(context.Background(), client.Netns, nil, "ping", "-c", "2", "-i", "0.2", "-W", "2", server.IP.String()); err != nil {
				t.Errorf("ping client -> server: %v\n%s", err, out)
			}
			save := "iptables-legacy-save"
			if tc.backend == BackendNFT {
				save = "iptables-nft-save"
			}
			for i, n := range s.Chain.Nodes {
				out, err := netns.Run(context.Background(), n.Netns, nil, save, "-t", "filter")
				if err != nil {
					t.Fatal(err)
				}
				checkFirewallRules(t, fmt.Sprintf("hop %d", i+1), string(out), tc.stateful, true, 5)
				checkHopQdiscs(t, i+1, n.Netns, tc.devs)
				// A stateless firewall leaves conntrack off in the hop: the
				// kernel hooks it into a namespace only for rules that need
				// it, so no NOTRACK rule is needed.
				if cnt, ok := conntrackCount(t, n.Netns); ok && (cnt > 0) != tc.stateful {
					t.Errorf("hop %d: %d conntrack entries (stateful %v)", i+1, cnt, tc.stateful)
				}
			}
			// The ends hold the rules in INPUT, as the seed's scripts did:
			// the server's INPUT is where a direct pair walks them.
			for _, e := range []struct{ name, netns string }{{"client", client.Netns}, {"server", server.Netns}} {
				out, err := netns.Run(context.Background(), e.netns, nil, save, "-t", "filter")
				if err != nil {
					t.Fatal(err)
				}
				checkFirewallRules(t, e.name, string(out), tc.stateful, false, 5)
				// direction all shapes the ends' eth0 too, as the seed did.
				if strings.Contains(tc.fns, "direction: all") {
					checkEndQdisc(t, e.name, e.netns)
				}
			}
			if len(s.Chain.Nodes) != tc.length {
				t.Errorf("%d hops, want %d", len(s.Chain.Nodes), tc.length)
			}
		})
	}
}

// checkFirewallRules checks a namespace's firewall: CNLAB-FW holds filler
// rules (stateful ones ask conntrack for byte counts), jumped to from
// INPUT, and from FORWARD in a hop.
func checkFirewallRules(t *testing.T, where string, save string, stateful, forward bool, filler int) {
	t.Helper()
	var rules, jumps []string
	for _, l := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(l, "-A "+FirewallChain+" "):
			rules = append(rules, l)
		case strings.HasPrefix(l, "-A "):
			jumps = append(jumps, l)
		}
	}
	wantJumps := []string{"-A INPUT -j " + FirewallChain}
	if forward {
		wantJumps = append(wantJumps, "-A FORWARD -j "+FirewallChain)
	}
	if len(rules) != filler || fmt.Sprint(jumps) != fmt.Sprint(wantJumps) {
		t.Errorf("%s: %d rules in %s (want %d), jumps %q (want %q):\n%s", where, len(rules), FirewallChain, filler, jumps, wantJumps, save)
		return
	}
	if filler > 0 {
		if ct := strings.Contains(rules[0], "-m connbytes"); ct != stateful {
			t.Errorf("%s: first rule %q (stateful %v)", where, rules[0], stateful)
		}
	}
}

func checkHopQdiscs(t *testing.T, hop int, ns string, shaped []string) {
	t.Helper()
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, dev := range []string{"eth0", "eth1"} {
		l, err := h.LinkByName(dev)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := h.QdiscList(l)
		if err != nil {
			t.Fatal(err)
		}
		var htb *netlink.Htb
		for _, q := range qs {
			if x, ok := q.(*netlink.Htb); ok && q.Attrs().Parent == netlink.HANDLE_ROOT {
				htb = x
			}
		}
		want := false
		for _, d := range shaped {
			want = want || d == dev
		}
		if (htb != nil) != want {
			t.Errorf("hop %d %s: htb root qdisc %v, want %v (%v)", hop, dev, htb != nil, want, qs)
			continue
		}
		if htb == nil {
			continue
		}
		cs, err := h.ClassList(l, htbQdiscHandle)
		if err != nil || len(cs) != 1 || cs[0].Attrs().Handle != htbClassHandle || htb.Defcls != 1 {
			t.Errorf("hop %d %s: classes %v (%v), default %d", hop, dev, cs, err, htb.Defcls)
		}
	}
}

// conntrackCount reads the number of conntrack entries of a namespace;
// false when the kernel has no conntrack.
func conntrackCount(t *testing.T, ns string) (int, bool) {
	t.Helper()
	out, err := netns.Run(context.Background(), ns, nil, "cat", "/proc/sys/net/netfilter/nf_conntrack_count")
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	return n, true
}

// TestShaperLimitsThroughput sends an iperf3 stream for one second through
// a chain shaped at 10mbit. Unshaped, a veth chain carries gigabits; the
// check only asks for less than twice the rate, so a slow machine cannot
// fail it.
func TestShaperLimitsThroughput(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	const rate = 10e6
	s, err := Preset("chain", PresetOptions{Length: 2, Functions: []Function{{Kind: FunctionShaper, Shaper: &Shaper{Rate: rate}}}},
		Overrides{Name: "t-nf-shaper"})
	if err != nil {
		t.Fatal(err)
	}
	upForTest(t, s)
	client, _ := s.Endpoint("client")
	server, _ := s.Endpoint("server")
	const port = "5399"
	srv := exec.Command("iperf3", "-s", "-1", "-p", port)
	if err := netns.Start(server.Netns, srv); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}()
	var rep struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	var out []byte
	for try := 0; ; try++ { // until the server listens
		// iperf3 -J may exit 0 with an "error" in its report.
		out, err = netns.Run(context.Background(), client.Netns, nil, "iperf3", "-c", server.IP.String(), "-p", port, "-t", "1", "-J")
		rep.Error = ""
		if jerr := json.Unmarshal(out, &rep); err == nil && jerr != nil {
			err = fmt.Errorf("iperf3 report: %w", jerr)
		}
		if err == nil && rep.Error != "" {
			err = errors.New(rep.Error)
		}
		if err == nil || try == 30 || !strings.Contains(err.Error(), "refused") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("iperf3: %v\n%s", err, out)
	}
	got := rep.End.SumReceived.BitsPerSecond
	t.Logf("received %.1f Mbit/s through a 10mbit shaper", got/1e6)
	if got <= 0 || got > 2*rate {
		t.Errorf("received %.1f Mbit/s through a %s shaper; want at most twice the rate\n%s", got/1e6, FormatRate(rate), out)
	}
}

// checkEndQdisc checks an end's eth0 holds the shaper's HTB with the
// seed's "large buffer" (a second at the rate, as far as HTB's 32 bits go).
func checkEndQdisc(t *testing.T, end, ns string) {
	t.Helper()
	h, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := h.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if _, ok := q.(*netlink.Htb); ok && q.Attrs().Parent == netlink.HANDLE_ROOT {
			cls, err := h.ClassList(l, q.Attrs().Handle)
			if err != nil || len(cls) != 1 {
				t.Errorf("%s: htb classes %v, %v", end, cls, err)
			}
			return
		}
	}
	t.Errorf("%s: no htb qdisc on eth0 (qdiscs %v)", end, qs)
}
