package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/topology"
)

// upLab brings a lab up and registers its Down.
func upLab(t *testing.T, s *topology.Spec) {
	t.Helper()
	testutil.RequireRoot(t)
	if err := Up(context.Background(), s, UpOptions{}); err != nil {
		t.Fatalf("up: %v", err)
	}
	t.Cleanup(func() {
		if err := Down(s.Name, nil); err != nil {
			var nf *topology.NotFoundError
			if !errors.As(err, &nf) {
				t.Errorf("down: %v", err)
			}
		}
	})
}

// checkAllPairs has every endpoint exchange TCP data with every other one.
func checkAllPairs(t *testing.T, s *topology.Spec) {
	t.Helper()
	var peers []testutil.Peer
	for _, ep := range s.Endpoints {
		peers = append(peers, testutil.Peer{ID: ep.ID(), Netns: ep.Netns, IP: ep.IP})
	}
	testutil.CheckAllPairs(t, peers)
}

func TestUpTwiceChangesNothing(t *testing.T) {
	s, _ := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t-twice"})
	upLab(t, s)
	before, _ := topology.Netns(s.Name)
	err := Up(context.Background(), s, UpOptions{})
	var au *AlreadyUpError
	if !errors.As(err, &au) || !au.Complete || !au.SameSpec || !errors.Is(err, ErrAlreadyUp) {
		t.Fatalf("second up: %v", err)
	}
	other, _ := topology.Preset("multi-host", topology.PresetOptions{}, topology.Overrides{Name: "t-twice"})
	err = Up(context.Background(), other, UpOptions{})
	if !errors.As(err, &au) || au.SameSpec {
		t.Fatalf("up with another topology: %v", err)
	}
	after, _ := topology.Netns(s.Name)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("namespaces changed: %v -> %v", before, after)
	}
	checkAllPairs(t, s)
}

func TestDownThenUpAgainAtOnce(t *testing.T) {
	testutil.RequireRoot(t)
	s, _ := topology.Preset("multi-host", topology.PresetOptions{Link: "vxlan"}, topology.Overrides{Name: "t-again"})
	for i := 0; i < 3; i++ {
		if err := Up(context.Background(), s, UpOptions{}); err != nil {
			t.Fatalf("round %d: up: %v", i, err)
		}
		if err := Down(s.Name, nil); err != nil {
			t.Fatalf("round %d: down: %v", i, err)
		}
	}
	if names, _ := topology.Netns(s.Name); len(names) != 0 {
		t.Errorf("left: %v", names)
	}
}

func TestFailedUpLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	s, _ := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t-fail"})
	// Up refuses a datapath the machine cannot run before building: the
	// failure below must be the build's.
	if why := s.Datapath.Missing(&s.Options); why != "" {
		testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
		t.Fatal(why)
	}
	// A kernel error late in the build: the second endpoint's namespace name
	// is already taken by a stray mount cnlab did not make.
	bad := *s
	bad.Endpoints = append([]topology.Endpoint(nil), s.Endpoints...)
	bad.Endpoints[1].Netns = bad.Endpoints[0].Netns
	err := Up(context.Background(), &bad, UpOptions{Workers: 1})
	if err == nil {
		Down(s.Name, nil)
		t.Fatal("up succeeded with two endpoints in one namespace")
	}
	if names, _ := topology.Netns(s.Name); len(names) != 0 {
		t.Errorf("failed up left namespaces: %v", names)
	}
	if _, err := os.Stat(labDir(s.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed up left its ledger: %v", err)
	}
}

func TestDownFindsLabWithoutLedger(t *testing.T) {
	s, _ := topology.Preset("multi-host", topology.PresetOptions{}, topology.Overrides{Name: "t-noledger"})
	upLab(t, s)
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
	if names, _ := topology.Netns(s.Name); len(names) != 0 {
		t.Errorf("left: %v", names)
	}
}

func TestSeveralLabsAtOnce(t *testing.T) {
	a, _ := topology.Preset("multi-host", topology.PresetOptions{}, topology.Overrides{Name: "t-lab-a"})
	b, _ := topology.Preset("multi-host", topology.PresetOptions{}, topology.Overrides{Name: "t-lab-b"})
	upLab(t, a)
	upLab(t, b)
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
	var nf *topology.NotFoundError
	if err := Down("t-never-up", nil); !errors.As(err, &nf) {
		t.Errorf("got %v", err)
	}
}

// A lab that cannot be fully removed (a socket opened inside it by a
// process outside keeps a namespace alive) stays visible: Down fails and
// keeps the ledger, so status and a second down still find the lab; once
// the socket is closed, the second Down removes everything.
func TestFailedDownKeepsTheLedger(t *testing.T) {
	s, _ := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t-held"})
	upLab(t, s)
	ep, _ := s.Endpoint("server")
	srv, err := testutil.ListenEcho(ep.Netns, netip.AddrPortFrom(ep.IP, 7777))
	if err != nil {
		t.Fatal(err)
	}
	err = Down(s.Name, nil)
	srv.Close()
	if err == nil || !strings.Contains(err.Error(), "still held") {
		t.Fatalf("Down with a socket held in %s: %v", ep.Netns, err)
	}
	if _, err := ReadState(s.Name); err != nil {
		t.Fatalf("the ledger went with a failed down: %v", err)
	}
	if err := Down(s.Name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(labDir(s.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("second down left the ledger: %v", err)
	}
}
