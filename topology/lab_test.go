package topology

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/vishvananda/netlink"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// upForTest builds a lab and registers its teardown.
func upForTest(t *testing.T, s *Spec) {
	t.Helper()
	testutil.RequireRoot(t)
	if err := Build(context.Background(), s, BuildOptions{}); err != nil {
		Teardown(s.Name, nil)
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() {
		if err := Teardown(s.Name, nil); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
}

// checkAllPairs has every endpoint exchange TCP data with every other
// one, over each family of the lab.
func checkAllPairs(t *testing.T, s *Spec) {
	t.Helper()
	for _, fam := range s.Families() {
		var peers []testutil.Peer
		for _, ep := range s.Endpoints {
			ip, ok := ep.Addr(fam)
			if !ok {
				t.Fatalf("endpoint %s has no IPv%d address", ep.ID(), fam)
			}
			peers = append(peers, testutil.Peer{ID: ep.ID(), Netns: ep.Netns, IP: ip})
		}
		testutil.CheckAllPairs(t, peers)
	}
}

// TestDualStackCarriesTCPBetweenEveryPair builds dual-stack and
// IPv6-only labs over a wire, a VXLAN overlay and leaf bridges, and has
// every endpoint talk to every other over each family.
func TestDualStackCarriesTCPBetweenEveryPair(t *testing.T) {
	old := bridgeEndpoints
	bridgeEndpoints = 3
	t.Cleanup(func() { bridgeEndpoints = old })
	for _, tc := range []struct{ name, cidrs, link string }{
		{"dual-wire", "[10.64.0.0/24, 'fd00:64::/64']|[10.65.0.0/24, 'fd00:65::/64']", "wire"},
		{"dual-vxlan", "[10.64.0.0/24, 'fd00:64::/64']|[10.65.0.0/24, 'fd00:65::/64']", "vxlan"},
		{"v6-wire", "['fd00:64::/64']|['fd00:65::/64']", "wire"},
		{"v6-vxlan", "['fd00:64::/120']|['fd00:65::/120']", "vxlan"},
		{"v6-first", "['fd00:64::/64', 10.64.0.0/24]|['fd00:65::/64', 10.65.0.0/24]", "wire"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := strings.Split(tc.cidrs, "|")
			y := fmt.Sprintf("name: t-ds-%s\nhosts: [{name: h, podCIDRs: %s}, {name: g, podCIDRs: %s}]\nlinks: [{between: [h, g], kind: %s}]\nendpoints:\n", tc.name, c[0], c[1], tc.link)
			for i := 0; i < 5; i++ { // two leaf bridges on h
				y += fmt.Sprintf("  - {name: e%d, host: h}\n", i)
			}
			y += "  - {name: far, host: g}\n"
			s, err := Parse([]byte(y), "ds.yaml", Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			upForTest(t, s)
			checkAllPairs(t, s)
		})
	}
}

func TestPresetsCarryTCPBetweenEveryPair(t *testing.T) {
	cases := []struct {
		preset string
		opts   PresetOptions
	}{
		{"single-host", PresetOptions{}},
		{"multi-host", PresetOptions{}},
		{"multi-host", PresetOptions{Link: "vxlan"}},
		{"chain", PresetOptions{Length: 1}},
		{"chain", PresetOptions{Length: 4, Link: "bridge"}},
		{PresetDirect, PresetOptions{}},
		{PresetDirect, PresetOptions{Link: "bridge"}},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%s-%d", tc.preset, i), func(t *testing.T) {
			s, err := Preset(tc.preset, tc.opts, Overrides{Name: fmt.Sprintf("t-preset-%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			upForTest(t, s)
			checkAllPairs(t, s)
		})
	}
}

func TestFilesCarryTCPBetweenEveryPair(t *testing.T) {
	for _, f := range []string{"two-hosts-vxlan.yaml", "three-hosts.yaml", "chain-bridge.yaml", "chain-firewall.yaml", "chain-ovs.yaml"} {
		t.Run(f, func(t *testing.T) {
			s, err := Load(filepath.Join("..", "examples", f), Overrides{Name: "t-file"})
			if err != nil {
				t.Fatal(err)
			}
			if s.Chain != nil && s.Chain.Link == ChainOVS {
				testutil.RequireTool(t, "ovs-vswitchd", OVSPackage)
			}
			upForTest(t, s)
			checkAllPairs(t, s)
		})
	}
}

func TestVXLANCarriesPodTraffic(t *testing.T) {
	s, err := Preset("multi-host", PresetOptions{Link: "vxlan"}, Overrides{Name: "t-vxlan"})
	if err != nil {
		t.Fatal(err)
	}
	upForTest(t, s)
	checkAllPairs(t, s)
	// The pod traffic must have gone through the overlay device, not
	// around it: its counters moved on both hosts.
	for _, h := range s.Hosts {
		nh, err := netns.Handle(h.Netns)
		if err != nil {
			t.Fatal(err)
		}
		l, err := nh.LinkByName("vxlan0")
		nh.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st := l.Attrs().Statistics; st == nil || st.TxPackets < 10 || st.RxPackets < 10 {
			t.Errorf("host %s: vxlan0 carried too little: %+v", h.Name, st)
		}
	}
}

func TestTeardownKillsProcessesInside(t *testing.T) {
	testutil.RequireRoot(t)
	s, _ := Preset("single-host", PresetOptions{}, Overrides{Name: "t-procs"})
	upForTest(t, s)
	ep, _ := s.Endpoint("server")
	cmd := execSleep()
	if err := netns.Start(ep.Netns, cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := Teardown(s.Name, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process inside the lab survived teardown")
	}
}

// TestTeardownReturnsAfterDevicesAreGone checks the promise of Teardown (and so of lab.Down): when it
// returns, the kernel has already destroyed the lab's devices. An observer
// namespace outside the lab holds one end of a veth whose other end is in a
// lab host; that end must be gone the moment Teardown returns, with no waiting.
func TestTeardownReturnsAfterDevicesAreGone(t *testing.T) {
	s, _ := Preset("single-host", PresetOptions{}, Overrides{Name: "t-gone"})
	upForTest(t, s)
	obs, err := netns.Anonymous()
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	oh, err := netns.HandleAt(obs)
	if err != nil {
		t.Fatal(err)
	}
	defer oh.Close()
	hostNs, err := netns.Open(s.Hosts[0].Netns)
	if err != nil {
		t.Fatal(err)
	}
	err = oh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "observer"}, PeerName: "observed", PeerNamespace: netlink.NsFd(int(hostNs))})
	hostNs.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := Teardown(s.Name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := oh.LinkByName("observer"); err == nil {
		t.Error("Teardown returned while the lab's devices still existed")
	}
}

// TestTeardownReportsNamespaceHeldBySocket: a socket opened inside a lab
// namespace by a process that is not inside it keeps the namespace alive
// after its mount is gone. Teardown must say so instead of claiming success.
func TestTeardownReportsNamespaceHeldBySocket(t *testing.T) {
	s, _ := Preset("single-host", PresetOptions{}, Overrides{Name: "t-held"})
	upForTest(t, s)
	ep, _ := s.Endpoint("server")
	srv, err := testutil.ListenEcho(ep.Netns, netip.AddrPortFrom(ep.IP, 7777))
	if err != nil {
		t.Fatal(err)
	}
	err = Teardown(s.Name, nil)
	srv.Close()
	if err == nil || !strings.Contains(err.Error(), "still held") || !strings.Contains(err.Error(), ep.Netns) {
		t.Fatalf("Teardown with a socket held in %s: %v", ep.Netns, err)
	}
	// With the socket closed the kernel frees it; a second teardown
	// succeeds.
	if err := Teardown(s.Name, nil); err != nil {
		t.Fatal(err)
	}
}

// TestTeardownClosesOrphanedSockets: a TCP connection into the lab, made
// by a process outside it (as cnlab's runner probes a server), closed with
// data the peer never acknowledged, lives on as an orphan retransmitting
// for minutes and would keep the client's namespace alive. Teardown closes
// such sockets and succeeds.
func TestTeardownClosesOrphanedSockets(t *testing.T) {
	testutil.RequireTool(t, "iperf3", "iperf3")
	testutil.RequireTool(t, "nft", "nftables")
	s, _ := Preset("direct", PresetOptions{}, Overrides{Name: "t-orphan"})
	upForTest(t, s)
	cl, _ := s.Endpoint("client")
	sv, _ := s.Endpoint("server")
	srv := exec.Command("iperf3", "-s", "-p", "7777")
	if err := netns.Start(sv.Netns, srv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() }) // Teardown kills it first
	var conn net.Conn
	var err error
	for i := 0; i < 50; i++ {
		if err = netns.Do(cl.Netns, func() error {
			conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(sv.IP, 7777).String(), time.Second)
			return err
		}); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	// From now on the server's side answers nothing: the client's data and
	// its FIN stay unacknowledged.
	if out, err := netns.Run(context.Background(), sv.Netns, []byte("table inet t {\n chain in {\n  type filter hook input priority 0;\n  tcp dport 7777 drop\n }\n}\n"), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
	if _, err := conn.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := Teardown(s.Name, nil); err != nil {
		t.Fatalf("teardown with an orphaned socket: %v", err)
	}
}

// TestLeafBridgesCarryTCPBetweenEveryPair builds a host whose endpoints
// fill its bridge and two leaves (three endpoints to a bridge here, 1,000
// in real labs), next to a host with one endpoint, and checks that every
// endpoint reaches every other: on its own bridge, across the host's
// bridges (proxy ARP and /32 routes) and across the wire.
func TestLeafBridgesCarryTCPBetweenEveryPair(t *testing.T) {
	old := bridgeEndpoints
	bridgeEndpoints = 3
	t.Cleanup(func() { bridgeEndpoints = old })
	y := "name: t-leaves\nhosts: [{name: h, podCIDR: 10.64.0.0/24}, {name: g, podCIDR: 10.65.0.0/24}]\nlinks: [{between: [h, g]}]\nendpoints:\n"
	for i := 0; i < 8; i++ {
		y += fmt.Sprintf("  - {name: e%d, host: h}\n", i)
	}
	y += "  - {name: far, host: g}\n"
	s, err := Parse([]byte(y), "leaves.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Host("h").Leaves; len(got) != 2 {
		t.Fatalf("leaves %v, want br1 and br2", got)
	}
	upForTest(t, s)
	checkAllPairs(t, s)
}
