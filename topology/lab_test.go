package topology

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/vishvananda/netlink"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// upForTest brings a lab up and registers its teardown.
func upForTest(t *testing.T, s *Spec) {
	t.Helper()
	testutil.RequireRoot(t)
	if err := Up(context.Background(), s, UpOptions{}); err != nil {
		t.Fatalf("up: %v", err)
	}
	t.Cleanup(func() {
		if err := Down(s.Name, nil); err != nil {
			var nf *NotFoundError
			if !errors.As(err, &nf) {
				t.Errorf("down: %v", err)
			}
		}
	})
}

// checkAllPairs starts an echo server in every endpoint and has every
// endpoint exchange TCP data with every other one, in both directions.
func checkAllPairs(t *testing.T, s *Spec) {
	t.Helper()
	const port = 7777
	for _, ep := range s.Endpoints {
		srv, err := testutil.ListenEcho(ep.Netns, netip.AddrPortFrom(ep.IP, port))
		if err != nil {
			t.Fatal(err)
		}
		// A listening socket keeps its namespace alive: close it before
		// the lab goes down, or Down rightly reports the namespace held.
		defer srv.Close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(s.Endpoints)*len(s.Endpoints))
	for _, a := range s.Endpoints {
		for _, b := range s.Endpoints {
			if a.ID() == b.ID() {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := testutil.ExchangeTCP(context.Background(), a.Netns, netip.AddrPortFrom(b.IP, port), 256<<10); err != nil {
					errs <- fmt.Errorf("%s -> %s: %w", a.ID(), b.ID(), err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
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
	for _, f := range []string{"two-hosts-vxlan.yaml", "three-hosts.yaml", "chain-bridge.yaml", "chain-firewall.yaml"} {
		t.Run(f, func(t *testing.T) {
			s, err := Load(filepath.Join("..", "examples", f), Overrides{Name: "t-file"})
			if err != nil {
				t.Fatal(err)
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

func TestUpTwiceChangesNothing(t *testing.T) {
	s, _ := Preset("single-host", PresetOptions{}, Overrides{Name: "t-twice"})
	upForTest(t, s)
	before, _ := netns.List(LabNetnsPrefix(s.Name))
	err := Up(context.Background(), s, UpOptions{})
	var au *AlreadyUpError
	if !errors.As(err, &au) || !au.Complete || !au.SameSpec || !errors.Is(err, ErrAlreadyUp) {
		t.Fatalf("second up: %v", err)
	}
	other, _ := Preset("multi-host", PresetOptions{}, Overrides{Name: "t-twice"})
	err = Up(context.Background(), other, UpOptions{})
	if !errors.As(err, &au) || au.SameSpec {
		t.Fatalf("up with another topology: %v", err)
	}
	after, _ := netns.List(LabNetnsPrefix(s.Name))
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("namespaces changed: %v -> %v", before, after)
	}
	checkAllPairs(t, s)
}

func TestDownThenUpAgainAtOnce(t *testing.T) {
	testutil.RequireRoot(t)
	s, _ := Preset("multi-host", PresetOptions{Link: "vxlan"}, Overrides{Name: "t-again"})
	for i := 0; i < 3; i++ {
		if err := Up(context.Background(), s, UpOptions{}); err != nil {
			t.Fatalf("round %d: up: %v", i, err)
		}
		if err := Down(s.Name, nil); err != nil {
			t.Fatalf("round %d: down: %v", i, err)
		}
	}
	if names, _ := netns.List(LabNetnsPrefix(s.Name)); len(names) != 0 {
		t.Errorf("left: %v", names)
	}
}

func TestDownKillsProcessesInside(t *testing.T) {
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
	if err := Down(s.Name, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process inside the lab survived down")
	}
}

func TestFailedUpLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	s, _ := Preset("single-host", PresetOptions{}, Overrides{Name: "t-fail"})
	// A kernel error late in the build: the second endpoint's namespace name
	// is already taken by a stray mount cnlab did not make.
	bad := *s
	bad.Endpoints = append([]Endpoint(nil), s.Endpoints...)
	bad.Endpoints[1].Netns = bad.Endpoints[0].Netns
	err := Up(context.Background(), &bad, UpOptions{Workers: 1})
	if err == nil {
		Down(s.Name, nil)
		t.Fatal("up succeeded with two endpoints in one namespace")
	}
	if names, _ := netns.List(LabNetnsPrefix(s.Name)); len(names) != 0 {
		t.Errorf("failed up left namespaces: %v", names)
	}
	if _, err := os.Stat(labDir(s.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed up left its ledger: %v", err)
	}
}

func TestDownFindsLabWithoutLedger(t *testing.T) {
	s, _ := Preset("multi-host", PresetOptions{}, Overrides{Name: "t-noledger"})
	upForTest(t, s)
	if err := os.RemoveAll(labDir(s.Name)); err != nil {
		t.Fatal(err)
	}
	st, err := Status(s.Name)
	if err != nil || st.Health != HealthOrphaned {
		t.Fatalf("status: %+v %v", st, err)
	}
	if err := Down(s.Name, nil); err != nil {
		t.Fatal(err)
	}
	if names, _ := netns.List(LabNetnsPrefix(s.Name)); len(names) != 0 {
		t.Errorf("left: %v", names)
	}
}

func TestSeveralLabsAtOnce(t *testing.T) {
	a, _ := Preset("multi-host", PresetOptions{}, Overrides{Name: "t-lab-a"})
	b, _ := Preset("multi-host", PresetOptions{}, Overrides{Name: "t-lab-b"})
	upForTest(t, a)
	upForTest(t, b)
	checkAllPairs(t, a)
	checkAllPairs(t, b)
	if err := Down(a.Name, nil); err != nil {
		t.Fatal(err)
	}
	st, err := Status(b.Name)
	if err != nil || st.Health != HealthUp {
		t.Fatalf("lab b after lab a went down: %+v %v", st, err)
	}
}

func TestDownUnknownLab(t *testing.T) {
	testutil.RequireRoot(t)
	var nf *NotFoundError
	if err := Down("t-never-up", nil); !errors.As(err, &nf) {
		t.Errorf("got %v", err)
	}
}

// TestDownReturnsAfterDevicesAreGone checks the promise of Down: when it
// returns, the kernel has already destroyed the lab's devices. An observer
// namespace outside the lab holds one end of a veth whose other end is in a
// lab host; that end must be gone the moment Down returns, with no waiting.
func TestDownReturnsAfterDevicesAreGone(t *testing.T) {
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
	if err := Down(s.Name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := oh.LinkByName("observer"); err == nil {
		t.Error("Down returned while the lab's devices still existed")
	}
}

// TestDownReportsNamespaceHeldBySocket: a socket opened inside a lab
// namespace by a process that is not inside it keeps the namespace alive
// after its mount is gone. Down must say so instead of claiming success.
func TestDownReportsNamespaceHeldBySocket(t *testing.T) {
	s, _ := Preset("single-host", PresetOptions{}, Overrides{Name: "t-held"})
	upForTest(t, s)
	ep, _ := s.Endpoint("server")
	srv, err := testutil.ListenEcho(ep.Netns, netip.AddrPortFrom(ep.IP, 7777))
	if err != nil {
		t.Fatal(err)
	}
	err = Down(s.Name, nil)
	srv.Close()
	if err == nil || !strings.Contains(err.Error(), "still held") || !strings.Contains(err.Error(), ep.Netns) {
		t.Fatalf("Down with a socket held in %s: %v", ep.Netns, err)
	}
	// With the socket closed the kernel frees it; a second down clears the
	// ledger.
	if err := Down(s.Name, nil); err != nil {
		t.Fatal(err)
	}
}
