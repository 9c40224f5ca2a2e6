package kpshape_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/kpshape"
)

// recorded reads the listings TestFidelity kept in testdata (a run with
// KPSHAPE_DUMPS=$PWD/testdata).
func recorded(t *testing.T, side, mode string) kpshape.Listings {
	t.Helper()
	rd := func(ext string) string {
		b, err := os.ReadFile(filepath.Join("testdata", side+"-"+mode+"."+ext))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if mode == "iptables" {
		return kpshape.Listings{NAT: rd("nat"), Filter: rd("filter")}
	}
	return kpshape.Listings{NFT: rd("nft")}
}

// TestRecorded compares the recorded listings of a TestFidelity run as
// TestFidelity does, without root: the parsers and the known differences
// are checked on every run of the unit tests.
func TestRecorded(t *testing.T) {
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) {
			res, err := kpshape.Compare(mode, recorded(t, "real", mode), recorded(t, "cnlab", mode), kpshape.FixtureFrontends)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range res.Missing {
				t.Error(m)
			}
			for _, name := range res.Stale {
				t.Errorf("known difference %q found nothing", name)
			}
			for _, d := range res.Left {
				t.Errorf("a difference no known one accounts for:\n%s", d)
			}
			if len(res.Before) == 0 {
				t.Error("no difference at all before the known ones: the parsers see nothing")
			}
		})
	}
}

// TestNewDifferenceCaught changes cnlab's recorded rules as a regression
// of its proxies would, and requires the comparison to find each change
// (or a known difference gone).
func TestNewDifferenceCaught(t *testing.T) {
	cases := []struct {
		name, mode, ext, old, new string
	}{
		{"iptables probability", "iptables", "nat", "--probability 0.33333333349", "--probability 0.25000000000"},
		{"iptables hairpin rule lost", "iptables", "nat", "-A CNLAB-SEP-CBBYGXELLMNRY3WH -s 10.244.0.21/32 -j CNLAB-MARK-MASQ\n", ""},
		{"iptables affinity timeout", "iptables", "nat", "--seconds 30 --reap --name CNLAB-SEP-JUNDQR4DQPT3OUD7", "--seconds 20 --reap --name CNLAB-SEP-JUNDQR4DQPT3OUD7"},
		{"iptables reject becomes drop", "iptables", "filter", "--dport 80 -m comment --comment \"default/none:http tcp/80\" -j REJECT --reject-with icmp-port-unreachable", "--dport 80 -j DROP"},
		{"iptables mark bit", "iptables", "nat", "-A CNLAB-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000", "-A CNLAB-MARK-MASQ -j MARK --set-xmark 0x8000/0x8000"},
		{"nftables numgen modulus", "nftables", "nft", "numgen random mod 3 vmap", "numgen random mod 2 vmap"},
		{"nftables no-endpoint drop", "nftables", "nft", "10.96.0.14 . tcp . 80 : goto reject-chain", "10.96.0.14 . tcp . 80 : drop"},
		{"nftables node port not masqueraded", "nftables", "nft", "chain external-6I2LJO5J-default/np/tcp/http {\n\t\tjump mark-for-masquerade\n", "chain external-6I2LJO5J-default/np/tcp/http {\n"},
		{"nftables hairpin rule lost", "nftables", "nft", "\t\tip saddr 10.244.0.22 jump mark-for-masquerade\n", ""},
		{"nftables affinity lost", "nftables", "nft", "\t\tip saddr @affinity-JUNDQR4D-default/aff/tcp/http__10.244.0.61/8080 goto endpoint-JUNDQR4D-default/aff/tcp/http__10.244.0.61/8080\n", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			real, mine := recorded(t, "real", c.mode), recorded(t, "cnlab", c.mode)
			field := map[string]*string{"nat": &mine.NAT, "filter": &mine.Filter, "nft": &mine.NFT}[c.ext]
			if !strings.Contains(*field, c.old) {
				t.Fatalf("testdata/cnlab-%s.%s has no %q", c.mode, c.ext, c.old)
			}
			*field = strings.Replace(*field, c.old, c.new, 1)
			res, err := kpshape.Compare(c.mode, real, mine, kpshape.FixtureFrontends)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() {
				t.Errorf("the change went unnoticed")
			}
			t.Logf("stale %v; left:\n%s", res.Stale, strings.Join(res.Left, "\n"))
		})
	}
	// A known difference that is gone is reported.
	real, mine := recorded(t, "real", "iptables"), recorded(t, "cnlab", "iptables")
	real.NAT = strings.ReplaceAll(strings.ReplaceAll(real.NAT, ":KUBE-PROXY-CANARY - [0:0]\n", ""), ":KUBE-KUBELET-CANARY - [0:0]\n", "")
	real.Filter = strings.ReplaceAll(strings.ReplaceAll(real.Filter, ":KUBE-PROXY-CANARY - [0:0]\n", ""), ":KUBE-KUBELET-CANARY - [0:0]\n", "")
	res, err := kpshape.Compare("iptables", real, mine, kpshape.FixtureFrontends)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Stale, []string{"canary chains"}) || len(res.Left) > 0 {
		t.Errorf("canary chains removed from kube-proxy's side: stale %v, left %v; want stale [canary chains]", res.Stale, res.Left)
	}
}

// TestParseEmpty: a table or listing without the proxy's maps and chains
// parses to a shape without frontends.
func TestParseEmpty(t *testing.T) {
	s, err := kpshape.ParseNFT("table ip kube-proxy {\n}\n")
	if err != nil || len(s.Frontends()) != 0 {
		t.Errorf("empty table: %v, %v", s, err)
	}
	if _, err := kpshape.ParseNFT(""); err == nil {
		t.Error("no table: no error")
	}
	s, err = kpshape.ParseIPTables("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n", "")
	if err != nil || len(s.Frontends()) != 0 {
		t.Errorf("empty nat: %v, %v", s, err)
	}
}
