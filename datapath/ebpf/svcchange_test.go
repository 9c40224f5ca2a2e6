package ebpf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cnlab/cnlab/internal/files"
)

// TestServiceStatePatched: a host's state file patched in place, record
// by record, after changes, deletions (a record moved) and additions,
// reads back as the memo's state, as written whole (json.Marshal) would.
func TestServiceStatePatched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	st := renderServices(bigTable(50, 2), "flip", nil)
	hm := newHostMemo(st)
	if err := hm.save(path); err != nil { // whole: no file yet
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		var back svcState
		if err := files.ReadJSON(path, &back); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(back.Frontends) != len(hm.st.Frontends) || len(back.UDP) != len(hm.st.UDP) {
			t.Fatalf("%s: read back %d frontends and %d UDP, the memo has %d and %d", what,
				len(back.Frontends), len(back.UDP), len(hm.st.Frontends), len(hm.st.UDP))
		}
		for k, e := range hm.st.Frontends {
			b := back.Frontends[k]
			if b == nil || b.ID != e.ID || b.Half != e.Half || !b.same(e) {
				t.Errorf("%s: frontend %s read back %+v, want %+v", what, svcKeyString(k), b, e)
			}
		}
		whole, err := json.Marshal(svcState{Frontends: back.Frontends, UDP: back.UDP})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		if len(data) != len(whole) {
			t.Errorf("%s: %d bytes, written whole %d", what, len(data), len(whole))
		}
	}
	check("whole")
	other := renderServices(bigTable(60, 3), "flip", nil)
	n := 0
	for k, e := range other.Frontends {
		switch _, had := hm.st.Frontends[k]; {
		case had && n%3 == 0:
			hm.set(k, nil) // deleted: the last record moves
		case had:
			e.ID, e.Half = hm.st.Frontends[k].ID, 1
			hm.set(k, e) // changed
		default:
			e.ID = uint32(1000 + n)
			hm.set(k, e) // added
		}
		n++
		if n%17 == 0 {
			if err := hm.save(path); err != nil {
				t.Fatal(err)
			}
			check("patched")
		}
	}
	hm.st.UDP, hm.udpJSON = nil, nil
	for k := range hm.st.Frontends {
		hm.set(k, nil)
		if len(hm.st.Frontends) == 10 {
			break
		}
	}
	if err := hm.save(path); err != nil {
		t.Fatal(err)
	}
	check("shrunk, no UDP")
}
