package nftables

import (
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/service"
)

const newSetElem = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWSETELEM)

// TestBatchElementsSplit: a change adding 1,000 Services writes the map
// elements in messages of at most elementsPerMessage, each a well-formed
// element list (its length is 16 bits: 1,000 elements overflow it), all
// in the one batch (pure: no kernel).
func TestBatchElementsSplit(t *testing.T) {
	to, _ := scaleTables(t, 1000, 1)
	before, after := Render(&service.Table{}, "flip"), Render(to, "flip")
	b, err := diffStates(&before, &after).batch()
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := b.messages()
	if err != nil {
		t.Fatal(err)
	}
	total, begins := 0, 0
	for _, m := range msgs {
		if m.Header.Type == netlink.HeaderType(unix.NFNL_MSG_BATCH_BEGIN) {
			begins++
		}
		if m.Header.Type != newSetElem {
			continue
		}
		attrs, err := netlink.UnmarshalAttributes(m.Data[4:])
		if err != nil {
			t.Fatalf("element message: %v", err)
		}
		for _, a := range attrs {
			if a.Type&^unix.NLA_F_NESTED != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			els, err := netlink.UnmarshalAttributes(a.Data)
			if err != nil {
				t.Fatalf("element list: %v", err)
			}
			if len(els) > elementsPerMessage {
				t.Errorf("%d elements in one message, want at most %d", len(els), elementsPerMessage)
			}
			total += len(els)
		}
	}
	if want := len(after.Maps["service-ips"]); total < want {
		t.Errorf("%d elements in the batch, want at least %d (service-ips)", total, want)
	}
	if begins != 1 {
		t.Errorf("%d batches, want 1", begins)
	}
}
