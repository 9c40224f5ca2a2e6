package kpshape_test

import (
	"os"
	"testing"

	"github.com/cnlab/cnlab/internal/kpshape"
)

func TestDev(t *testing.T) {
	dir := os.Getenv("KPSHAPE_DEV")
	if dir == "" {
		t.Skip()
	}
	rd := func(n string) string { b, _ := os.ReadFile(dir + "/" + n); return string(b) }
	real, err := kpshape.ParseIPTables(rd("real-iptables.nat"), rd("real-iptables.filter"))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := kpshape.ParseIPTables(rd("cnlab-iptables.nat"), rd("cnlab-iptables.filter"))
	if err != nil {
		t.Fatal(err)
	}
	real = real.Only(mine.Frontends())
	for _, d := range kpshape.Diff(real, mine) {
		t.Log(d)
	}
	t.Log("=========== NFT")
	real, err = kpshape.ParseNFT(rd("real-nftables.nft"))
	if err != nil {
		t.Fatal(err)
	}
	mine, err = kpshape.ParseNFT(rd("cnlab-nftables.nft"))
	if err != nil {
		t.Fatal(err)
	}
	real = real.Only(mine.Frontends())
	for _, d := range kpshape.Diff(real, mine) {
		t.Log(d)
	}
}
