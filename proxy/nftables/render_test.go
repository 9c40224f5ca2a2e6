package nftables

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/proxy/proxytest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file; got:\n%s", name, got)
	}
}

// The full script of host flip for the test table.
func TestRenderGolden(t *testing.T) {
	st := Render(proxytest.Table(), "flip")
	golden(t, "flip.nft", fullScript(&st))
}

// An identical table changes nothing; a removed backend sends element
// and chain diffs only.
func TestDiff(t *testing.T) {
	a, b := Render(proxytest.Table(), "flip"), Render(proxytest.Table(), "flip")
	if s := diffScript(&a, &b); s != "" {
		t.Fatalf("identical tables differ:\n%s", s)
	}
	tb := proxytest.Table()
	web := &tb.Frontends[3]
	web.Backends = web.Backends[:1]
	c := Render(tb, "flip")
	golden(t, "flip-remove-backend.nft", diffScript(&a, &c))
	tb.Frontends = tb.Frontends[:1]
	d := Render(tb, "flip")
	golden(t, "flip-remove-services.nft", diffScript(&c, &d))
}

// A dual-stack table: the ip table is Table's own, unchanged; the IPv6
// frontends render into the ip6 table, their counterparts; a diff from
// an IPv4-only state creates the ip6 table whole.
func TestRenderDualStack(t *testing.T) {
	v4 := Render(proxytest.Table(), "flip")
	st := Render(proxytest.DualTable(), "flip")
	if st.V6 == nil || v4.V6 != nil {
		t.Fatalf("V6: %v for the dual table, %v for the IPv4 one", st.V6, v4.V6)
	}
	if s := diffFamily(&v4, &st, fam4); s != "" {
		t.Errorf("the ip table changed with IPv6 frontends beside it:\n%s", s)
	}
	script := fullFamily(st.V6, fam6)
	golden(t, "flip6.nft", script)
	for _, bad := range []string{"ipv4_addr", "ip daddr", "ip saddr", "10.", "add table ip cnlab-svc"} {
		if strings.Contains(script, bad) {
			t.Errorf("the ip6 table's script holds %q", bad)
		}
	}
	if d := diffScript(&v4, &st); !strings.HasPrefix(d, "add table ip6 cnlab-svc\ndelete table ip6 cnlab-svc\n") {
		t.Errorf("diff from IPv4 only:\n%s", d)
	}
	if d := diffScript(&st, &st); d != "" {
		t.Errorf("identical dual-stack states differ:\n%s", d)
	}
}
