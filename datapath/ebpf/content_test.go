package ebpf

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cnlab/cnlab/policy"
)

func TestContentRoundTrip(t *testing.T) {
	g := &genContent{outerIDs: outerIDs{PolicyID: 7, ExactID: 8, IPCacheID: 9},
		IPCache: []ipEntry{{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Key: 1001, Identity: 1001},
			{Prefix: netip.MustParsePrefix("192.168.0.0/16"), Key: 1 << 24, Identity: 1 << 24}},
		Slots: []slotContent{
			{ID: "x/a", Identity: 1001, Enforce: cnlabIsolationISO_INGRESS | cnlabIsolationWILD_INGRESS, ExactCap: 64, LPM: true,
				Entries: []polEntry{{Peer: 0, Dir: 0, Proto: 6, Port: 80, Plen: 64, Proxy: true, Rule: 3},
					{Peer: 1002, Dir: 1, Proto: 17, Port: 1024, Plen: 54, Deny: true, Rule: 0xffffffff}}},
			{},
			{ID: "y/b", Identity: 1003},
		}}
	b := g.marshal()
	got, err := unmarshalContent(b)
	if err != nil {
		t.Fatal(err)
	}
	// A slot without entries decodes with an empty, not a nil, list.
	for i := range got.Slots {
		if len(got.Slots[i].Entries) == 0 {
			got.Slots[i].Entries = nil
		}
	}
	if !reflect.DeepEqual(got, g) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, g)
	}
	// Every truncation and every flipped byte is refused, never decoded
	// into something else.
	for n := 0; n < len(b); n++ {
		if _, err := unmarshalContent(b[:n]); err == nil {
			t.Fatalf("record cut to %d of %d bytes decoded", n, len(b))
		}
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, err := unmarshalContent(c); err == nil {
			t.Fatalf("record with byte %d flipped decoded", i)
		}
	}
	path := filepath.Join(t.TempDir(), "rec")
	if loadContent(path) != nil {
		t.Error("a missing record loaded")
	}
	if err := saveContent(path, g); err != nil {
		t.Fatal(err)
	}
	if loadContent(path) == nil {
		t.Error("a saved record did not load")
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if loadContent(path) != nil {
		t.Error("garbage loaded as a record")
	}
}

func TestDiffEntries(t *testing.T) {
	e := func(peer uint32, port uint16, plen uint8, deny bool) polEntry {
		return polEntry{Peer: peer, Proto: 6, Port: port, Plen: plen, Deny: deny}
	}
	have := []polEntry{e(1, 80, 64, false), e(1, 81, 64, false), e(2, 0, 48, false), e(3, 80, 64, true)}
	want := []polEntry{e(0, 80, 64, false), e(1, 81, 64, true), e(2, 0, 48, false), e(3, 80, 64, true), e(3, 443, 64, false)}
	dels, puts := diffEntries(have, want)
	if !reflect.DeepEqual(dels, []polEntry{e(1, 80, 64, false)}) {
		t.Errorf("dels %v", dels)
	}
	if !reflect.DeepEqual(puts, []polEntry{e(0, 80, 64, false), e(1, 81, 64, true), e(3, 443, 64, false)}) {
		t.Errorf("puts %v", puts)
	}
	if d, p := diffEntries(want, want); d != nil || p != nil {
		t.Errorf("no change: dels %v puts %v", d, p)
	}
}

// TestContentRoundTripTiers: entries with a cluster tier's decision, and
// the one below it, come back as they were written, beside entries of
// the NetworkPolicy tier.
func TestContentRoundTripTiers(t *testing.T) {
	es := []polEntry{
		{Peer: 1002, Dir: 0, Proto: 6, Port: 80, Plen: 64, Rule: 7},
		{Peer: 1002, Dir: 0, Proto: 6, Port: 80, Plen: 60, Tier: policy.TierAdmin, Pass: true, Prec: 1<<10 | 3, Rule: 9,
			Below: polBelow{Set: true, Deny: true, Rule: 11}},
		{Peer: 0, Dir: 0, Proto: 6, Port: 8080, Plen: 64, Tier: policy.TierAdmin, Prec: 0, Rule: 12,
			Below: polBelow{Set: true, Tier: policy.TierBaseline, Proxy: true, Prec: 5, Rule: 13}},
		{Peer: 0, Dir: 1, Proto: 17, Port: 0, Plen: 48, Tier: policy.TierBaseline, Deny: true, Prec: 2, Rule: 14},
		{Peer: 1003, Dir: 1, Proto: 0, Port: 0, Plen: 40, Tier: policy.TierAdmin, Prec: 4, Rule: 15},
	}
	g := &genContent{Slots: []slotContent{{ID: "x/a", Identity: 1001, Entries: es}}}
	got, err := unmarshalContent(g.marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Slots[0].Entries, es) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got.Slots[0].Entries, es)
	}
}
