package ebpf

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
)

// bigTable is n ClusterIP frontends of nb backends each on host flip.
func bigTable(n, nb int) *service.Table {
	t := &service.Table{}
	for i := range n {
		f := service.Frontend{Service: fmt.Sprintf("default/s%d", i), Protocol: "tcp",
			VIP: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: 80}
		if i%10 == 0 {
			f.Protocol = "udp"
		}
		for j := range nb {
			f.Backends = append(f.Backends, service.Backend{Endpoint: fmt.Sprintf("default/w%d", j), Host: "flip",
				IP: netip.AddrFrom4([4]byte{10, 0, 192, byte(j + 2)}), Port: 8080})
		}
		t.Frontends = append(t.Frontends, f)
	}
	return t
}

// TestRenderServices: what a host's maps hold for a table, and the
// recorded state read back the same.
func TestRenderServices(t *testing.T) {
	tb := bigTable(20, 3)
	tb.Frontends[1].InternalLocal = true
	tb.Frontends[1].Backends[0].Host = "flap"
	tb.Frontends[1].Backends[1].Host = "flap"
	tb.Frontends[1].Backends[2].Host = "flap"
	tb.Frontends[2].Backends = nil
	tb.Frontends[3].Affinity = 30
	st := renderServices(tb, "flip", nil)
	if len(st.Frontends) != 20 || len(st.UDP) != 2 {
		t.Fatalf("%d frontends, %d UDP", len(st.Frontends), len(st.UDP))
	}
	key := func(i int) cnlabSvcKey {
		f := tb.Frontends[i]
		return cnlabSvcKey{Vip: ip4(f.VIP), Port: htons(f.Port), Proto: protoNumber(f.Protocol)}
	}
	if e := st.Frontends[key(1)]; !e.Drop || e.Count != 0 {
		t.Errorf("internalTrafficPolicy Local, no backend here: %+v, want drop", e)
	}
	if e := st.Frontends[key(2)]; e.Drop || e.Count != 0 {
		t.Errorf("no backends: %+v, want reject", e)
	}
	if e := st.Frontends[key(3)]; e.Affinity != 30 || e.Count != 3 || len(e.Backends) != 3 {
		t.Errorf("affinity: %+v", e)
	}
	if st.Frontends[key(4)].Sum != st.Frontends[key(5)].Sum {
		t.Error("the same backends have different sums")
	}
	other := bigTable(20, 3)
	other.Frontends[5].Backends[2].Port = 8081
	if renderServices(other, "flip", nil).Frontends[key(5)].same(st.Frontends[key(5)]) {
		t.Error("a changed backend port leaves the frontend the same")
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back svcState
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	for k, e := range st.Frontends {
		b := back.Frontends[k]
		if b == nil || !b.same(e) || b.ID != e.ID || b.Half != e.Half {
			t.Errorf("%s read back as %+v, want %+v", svcKeyString(k), b, e)
		}
	}
	if err := json.Unmarshal([]byte(`{"frontends":"AAAA"}`), &back); err == nil {
		t.Error("a truncated record was read")
	}
}

// BenchmarkServiceUpdateCPU is the user-space part of one change of the
// eBPF proxy at 10,000 frontends of four backends, piece by piece: the
// table's digest (recorded per host), rendering a host's frontends, and
// writing and reading the recorded state.
//
//	go test -run '^$' -bench ServiceUpdateCPU -count 5 ./datapath/ebpf
func BenchmarkServiceUpdateCPU(b *testing.B) {
	t := bigTable(10000, 4)
	b.Run("digest", func(b *testing.B) {
		for range b.N {
			proxy.Digest(t)
		}
	})
	b.Run("render", func(b *testing.B) {
		for range b.N {
			renderServices(t, "flip", nil)
		}
	})
	st := renderServices(t, "flip", nil)
	data, _ := json.Marshal(st)
	b.Run("save", func(b *testing.B) {
		for range b.N {
			if _, err := json.Marshal(st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("load", func(b *testing.B) {
		for range b.N {
			var s svcState
			if err := json.Unmarshal(data, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
