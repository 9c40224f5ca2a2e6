package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/proxy/nftables"
	"github.com/cnlab/cnlab/service"
)

// many is n frontends of k backends each (of four), from VIP
// 10.96.(first/250).(first%250+1): up to 60,000 of them.
func many(first, n, k int) []service.Frontend {
	bes := bulk(0, 1, 4)[0].Backends
	var out []service.Frontend
	for i := first; i < first+n; i++ {
		out = append(out, service.Frontend{Service: fmt.Sprintf("default/m%05d", i), Protocol: "tcp",
			VIP: netip.AddrFrom4([4]byte{10, 96, byte(2 + i/250), byte(i%250 + 1)}), Port: 80, Backends: bes[:k]})
	}
	return out
}

// TestApplyChangeLargeBatch: a change of many Services goes through the
// netlink path as one batch per host, however many messages it holds: the
// kernel must take it whole (no EMSGSIZE from a batch larger than the
// socket's send buffer) and its acknowledgements must all be read (no
// ENOBUFS from a receive buffer too small for one per message). Before
// the fix, with the default buffers (208 KiB), 30 Services of one
// backend added to 15 failed with ENOBUFS (20 to 10 passed), 200 added
// to 100 with EMSGSIZE (seed004-cluster-lab.yaml's point 100 -> 300).
// The host's table is then what Apply of the new table writes.
func TestApplyChangeLargeBatch(t *testing.T) {
	ctx := context.Background()
	spec, p, ca, list := upChangeLab(t, "t-nftbig")
	wipe := func() {
		for _, h := range spec.Hosts {
			path := change.StatePath(spec.Name, nftables.StateKind, h.Name)
			for _, f := range []string{path, path + ".log"} {
				if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
		}
	}
	// The log is kept (not folded into the state file) so that it shows
	// the change went through the netlink path.
	was := *nftables.CompactLog
	defer func() { *nftables.CompactLog = was }()
	*nftables.CompactLog = func(int64, int64) bool { return false }
	cases := []struct{ base, added, backends int }{
		{15, 30, 1},   // the smallest of those tried that failed (ENOBUFS; 10+20 passed)
		{50, 100, 1},  // ENOBUFS
		{100, 200, 1}, // seed004's 100 -> 300 (EMSGSIZE)
		{300, 600, 4},
	}
	if s := os.Getenv("NFTBIG"); s != "" { // NFTBIG=base,added,backends: one case
		f := strings.Split(s, ",")
		b, _ := strconv.Atoi(f[0])
		a, _ := strconv.Atoi(f[1])
		k, _ := strconv.Atoi(f[2])
		cases = cases[:1]
		cases[0].base, cases[0].added, cases[0].backends = b, a, k
	}
	for _, c := range cases {
		name := fmt.Sprintf("%d+%d of %d backends", c.base, c.added, c.backends)
		small := table(many(0, c.base, c.backends))
		large := table(many(0, c.base+c.added, c.backends))
		wipe()
		if err := p.Apply(ctx, spec, large); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := list()
		for _, step := range []struct {
			what     string
			from, to *service.Table
		}{{"add", small, large}, {"remove", large, small}, {"add again", small, large}} {
			if step.what == "add" {
				wipe()
				if err := p.Apply(ctx, spec, small); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			if err := ca.ApplyChange(ctx, spec, step.from, step.to); err != nil {
				t.Fatalf("%s, %s: %v", name, step.what, err)
			}
			for _, h := range spec.Hosts {
				path := change.StatePath(spec.Name, nftables.StateKind, h.Name)
				if _, err := os.Stat(path + ".log"); err != nil {
					t.Errorf("%s, %s: host %s: no delta log, the change was applied whole: %v", name, step.what, h.Name, err)
				}
			}
		}
		if got := list(); !mapsEqual(got, want) {
			t.Errorf("%s: ApplyChange left\n%v\n\nApply\n%v", name, got, want)
		}
	}
}
