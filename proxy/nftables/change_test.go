package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/proxy/nftables"
	"github.com/cnlab/cnlab/proxy/proxytest"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const changeLab = `name: t-nftinc
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wire}
endpoints:
  - {name: w1, host: flip}
  - {name: w2, host: flip}
  - {name: w3, host: flap}
`

// bulk is n frontends of k backends each (of three), from VIP 10.96.1.first.
func bulk(first, n, k int) []service.Frontend {
	bes := []service.Backend{
		{Endpoint: "default/w1", Host: "flip", IP: netip.MustParseAddr("10.0.192.2"), Port: 8080},
		{Endpoint: "default/w2", Host: "flip", IP: netip.MustParseAddr("10.0.192.3"), Port: 8080},
		{Endpoint: "default/w3", Host: "flap", IP: netip.MustParseAddr("10.0.191.2"), Port: 8080},
		{Endpoint: "", Host: "flap", IP: netip.MustParseAddr("10.0.191.9"), Port: 8080},
	}
	var out []service.Frontend
	for i := first; i < first+n; i++ {
		out = append(out, service.Frontend{Service: fmt.Sprintf("default/s%03d", i), Protocol: "tcp",
			VIP: netip.AddrFrom4([4]byte{10, 96, 1, byte(i)}), Port: 80, Backends: slices.Clone(bes[:k])})
	}
	return out
}

func table(fs ...[]service.Frontend) *service.Table {
	t := &service.Table{}
	for _, f := range fs {
		t.Frontends = append(t.Frontends, f...)
	}
	slices.SortStableFunc(t.Frontends, func(a, b service.Frontend) int { return strings.Compare(a.Service, b.Service) })
	return t
}

// normalise sorts the elements of each set and map of an nft listing
// (the kernel lists a hash's elements in its own order).
func normalise(s string) string {
	var out []string
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "elements = {") {
			body := strings.TrimPrefix(l, "elements = {")
			for !strings.HasSuffix(strings.TrimSpace(body), "}") && i+1 < len(lines) {
				i++
				body += " " + strings.TrimSpace(lines[i])
			}
			body = strings.TrimSuffix(strings.TrimSpace(body), "}")
			var els []string
			for _, e := range strings.Split(body, ",") {
				els = append(els, strings.TrimSpace(e))
			}
			sort.Strings(els)
			out = append(out, "elements = { "+strings.Join(els, ", ")+" }")
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// changer is the nftables proxy's incremental path.
type changer interface {
	ApplyChange(ctx context.Context, lab *topology.Spec, from, to *service.Table) error
}

// upChangeLab brings changeLab up under name (down at the test's end) with
// the nftables proxy set up, and returns it, the proxy, its ApplyChange
// and a listing of every host's table (normalised, blocks sorted).
func upChangeLab(t *testing.T, name string) (*topology.Spec, proxy.Proxy, changer, func() map[string]string) {
	t.Helper()
	testutil.RequireRoot(t)
	ctx := context.Background()
	spec, err := topology.Parse([]byte(strings.Replace(changeLab, "t-nftinc", name, 1)), "nftinc lab", topology.Overrides{Datapath: "iptables", Proxy: "nftables"})
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Up(ctx, spec, lab.UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(spec.Name, nil); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	p := nftables.New()
	if err := p.Setup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	list := func() map[string]string {
		out, err := p.Describe(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		for h, s := range out {
			out[h] = sortBlocks(normalise(s))
		}
		return out
	}
	return spec, p, p.(changer), list
}

// TestApplyChangeSameAsApply: every change ApplyChange makes through the
// netlink path (Services added and removed, backends changed, one and
// four backends, affinity, node ports, UDP, no backends) leaves each
// host's table as a whole Apply of the new table from nothing does, and
// Apply folds the delta logs it leaves.
func TestApplyChangeSameAsApply(t *testing.T) {
	ctx := context.Background()
	spec, p, ca, _ := upChangeLab(t, "t-nftinc")
	shapes := proxytest.Table().Frontends
	web := shapes[3]
	web2 := web
	web2.Backends = web.Backends[:1]
	web2.Affinity = 60
	empty := shapes[1]
	filled := empty
	filled.Backends = bulk(0, 1, 1)[0].Backends
	one, four := bulk(10, 20, 1), bulk(40, 20, 4)
	steps := []struct {
		name string
		t    *service.Table
	}{
		{"start", table(shapes, one, four)},
		{"add one backend", table(shapes, one, four, bulk(70, 1, 1))},
		{"add four backends", table(shapes, one, four, bulk(70, 1, 1), bulk(71, 1, 4))},
		{"backends 4 to 3", table(shapes, one, four, bulk(70, 1, 1), bulk(71, 1, 3))},
		{"backends 1 to 4", table(shapes, one, four, bulk(70, 1, 4), bulk(71, 1, 3))},
		{"backends 4 to 1", table(shapes, one, four, bulk(70, 1, 1), bulk(71, 1, 3))},
		{"affinity and node port", table(shapes[:3], []service.Frontend{web2}, one, four, bulk(70, 1, 1), bulk(71, 1, 3))},
		{"no backends to one", table(shapes[:1], []service.Frontend{filled}, shapes[2:3], []service.Frontend{web2}, one, four, bulk(70, 1, 1), bulk(71, 1, 3))},
		{"remove", table(shapes, one, four)},
		{"remove a UDP one", table(shapes[1:], one, four)},
	}
	list := func() map[string]string {
		out, err := p.Describe(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		for h, s := range out {
			out[h] = normalise(s)
		}
		return out
	}
	// wipe forgets what the hosts hold: the next Apply rebuilds them.
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
	apply := func(name string, t_ *service.Table) {
		if err := p.Apply(ctx, spec, t_); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for i := 1; i < len(steps); i++ {
		name, from, to := steps[i].name, steps[i-1].t, steps[i].t
		// Apply's change (nft -f of the difference), as before ApplyChange.
		wipe()
		apply(name, from)
		apply(name, to)
		byScript := list()
		// ApplyChange's.
		wipe()
		apply(name, from)
		if err := ca.ApplyChange(ctx, spec, from, to); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, h := range spec.Hosts {
			path := change.StatePath(spec.Name, nftables.StateKind, h.Name)
			if _, err := os.Stat(path + ".log"); err != nil {
				t.Errorf("%s: host %s: no delta log, the change was applied whole: %v", name, h.Name, err)
			}
		}
		got := list()
		// Apply of the same table folds the logs and finds nothing to do.
		apply(name, to)
		if again := list(); !mapsEqual(again, got) {
			t.Errorf("%s: Apply after the change changed the table", name)
		}
		// The same table applied whole, from nothing: the same but for
		// the order of chains (the kernel lists them as created).
		wipe()
		apply(name, to)
		whole := list()
		for h := range whole {
			if got[h] != byScript[h] {
				t.Errorf("%s: host %s: ApplyChange left\n%s\n\nApply's nft -f change\n%s", name, h, got[h], byScript[h])
			}
			if sortBlocks(got[h]) != sortBlocks(whole[h]) {
				t.Errorf("%s: host %s: ApplyChange left\n%s\n\nApply from nothing\n%s", name, h, got[h], whole[h])
			}
		}
	}
	// The changes one after the other: the logs hold several deltas, or
	// (compact) are folded into the state file by ApplyChange at each.
	was := *nftables.CompactLog
	defer func() { *nftables.CompactLog = was }()
	for _, compact := range []bool{false, true} {
		if compact {
			*nftables.CompactLog = func(int64, int64) bool { return true }
		}
		apply("in a row", steps[0].t)
		for i := 1; i < len(steps); i++ {
			if err := ca.ApplyChange(ctx, spec, steps[i-1].t, steps[i].t); err != nil {
				t.Fatalf("in a row, %s: %v", steps[i].name, err)
			}
		}
		got := list()
		last := steps[len(steps)-1].t
		apply("in a row", last)
		if again := list(); !mapsEqual(again, got) {
			t.Errorf("in a row (compact %v): Apply after the changes changed the table", compact)
		}
		for _, h := range spec.Hosts {
			path := change.StatePath(spec.Name, nftables.StateKind, h.Name)
			if _, err := os.Stat(path + ".log"); !os.IsNotExist(err) {
				t.Errorf("host %s: the log was not folded: %v", h.Name, err)
			}
		}
		wipe()
		apply("in a row", last)
		if want := list(); !mapsEqual(sortAll(want), sortAll(got)) {
			t.Errorf("in a row (compact %v): ApplyChange left\n%v\n\nApply from nothing\n%v", compact, got, want)
		}
	}
}

// TestApplyChangeFaults: a change that fails on the second host puts the
// first back (its table and files as before); one that fails at the load
// changes nothing; one killed after a host's kernel changed leaves the
// host marked dirty, and Apply rebuilds it.
func TestApplyChangeFaults(t *testing.T) {
	ctx := context.Background()
	spec, p, ca, list := upChangeLab(t, "t-nftinc-f")
	// clean checks each host's files: not dirty, recording set.
	clean := func(what, set string) {
		t.Helper()
		for _, h := range spec.Hosts {
			hs := change.ReadHost(change.StatePath(spec.Name, nftables.StateKind, h.Name))
			if hs.Dirty || !slices.Equal(hs.Sets, []string{set}) {
				t.Errorf("%s: host %s files say %+v, want clean on %s", what, h.Name, hs, set)
			}
		}
	}
	a := table(proxytest.Table().Frontends, bulk(10, 5, 1), bulk(40, 5, 4))
	b := table(proxytest.Table().Frontends, bulk(10, 5, 1), bulk(40, 5, 4), bulk(70, 1, 4))
	for i := range b.Frontends {
		if f := &b.Frontends[i]; f.Service == "default/s043" {
			f.Backends = f.Backends[:2] // 4 -> 2
		}
	}
	if err := p.Apply(ctx, spec, a); err != nil {
		t.Fatal(err)
	}
	before := list()
	errInjected := fmt.Errorf("injected")
	hook := func(at, on string) {
		fault.SetHook(func(point, host string) error {
			if point == at && host == on {
				return errInjected
			}
			return nil
		})
	}
	// Fails on flap: flip is put back.
	hook(fault.Dirty, "flap")
	err := ca.ApplyChange(ctx, spec, a, b)
	fault.SetHook(nil)
	if err == nil || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("failed on flap: %v", err)
	}
	if got := list(); !mapsEqual(got, before) {
		t.Errorf("failed on flap: the tables are not as before:\n%v\n\nwant\n%v", got, before)
	}
	clean("failed on flap", proxy.Digest(a))
	// Fails at flip's load: nothing changes.
	if err := p.Apply(ctx, spec, a); err != nil { // the memo of a again
		t.Fatal(err)
	}
	hook(fault.AtomicLoad, "flip")
	err = ca.ApplyChange(ctx, spec, a, b)
	fault.SetHook(nil)
	if err == nil {
		t.Fatal("failed load: no error")
	}
	if got := list(); !mapsEqual(got, before) {
		t.Errorf("failed load: the tables are not as before")
	}
	clean("failed load", proxy.Digest(a))
	// Killed after flip's kernel changed: flip dirty, Apply repairs.
	if err := p.Apply(ctx, spec, a); err != nil {
		t.Fatal(err)
	}
	func() {
		killed := fmt.Errorf("killed")
		fault.SetHook(func(point, host string) error {
			if point == fault.Kernel && host == "flip" {
				panic(killed)
			}
			return nil
		})
		defer fault.SetHook(nil)
		defer func() {
			if r := recover(); r != killed {
				t.Fatalf("not killed at flip's kernel: %v", r)
			}
		}()
		_ = ca.ApplyChange(ctx, spec, a, b)
	}()
	if hs := change.ReadHost(change.StatePath(spec.Name, nftables.StateKind, "flip")); !hs.Dirty {
		t.Errorf("killed: flip's files say %+v, want dirty", hs)
	}
	if err := ca.ApplyChange(ctx, spec, a, b); err != nil {
		t.Fatal(err)
	}
	clean("repaired", proxy.Digest(b))
	got := list()
	for _, h := range spec.Hosts {
		path := change.StatePath(spec.Name, nftables.StateKind, h.Name)
		_ = os.Remove(path)
	}
	if err := p.Apply(ctx, spec, b); err != nil {
		t.Fatal(err)
	}
	if want := list(); !mapsEqual(got, want) {
		t.Errorf("repaired: the tables are not Apply's from nothing:\n%v\n\nwant\n%v", got, want)
	}
}

// sortBlocks sorts the blocks (chains, sets, maps) of a normalised listing.
func sortBlocks(s string) string {
	var blocks []string
	var cur []string
	depth := 0
	for _, l := range strings.Split(s, "\n") {
		if l == "" {
			continue
		}
		if strings.HasSuffix(l, "{") {
			depth++
		}
		if depth >= 2 || (depth == 1 && strings.HasPrefix(l, "}") && len(cur) > 0) {
			cur = append(cur, l)
		} else {
			blocks = append(blocks, l)
		}
		if l == "}" {
			depth--
			if depth == 1 && len(cur) > 0 {
				blocks = append(blocks, strings.Join(cur, "\n"))
				cur = nil
			}
		}
	}
	head := blocks[:0:0]
	var inner []string
	for _, b := range blocks {
		if strings.Contains(b, "\n") {
			inner = append(inner, b)
		} else {
			head = append(head, b)
		}
	}
	sort.Strings(inner)
	return strings.Join(append(head, inner...), "\n")
}

func sortAll(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = sortBlocks(v)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
