package iptables

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/proxy/proxytest"
	"github.com/cnlab/cnlab/service"
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

// The rebuild script of host flip for the test table, from an empty
// kernel: base jumps inserted, every chain written.
func TestRenderGolden(t *testing.T) {
	st := Render(proxytest.Table(), "flip")
	golden(t, "flip.rules", rebuildScript(map[string]string{}, st.Tables))
}

// Rendering is deterministic, an identical table changes nothing, and a
// removed backend rewrites only the chains that named it and deletes its
// endpoint chain.
func TestDiff(t *testing.T) {
	a, b := Render(proxytest.Table(), "flip"), Render(proxytest.Table(), "flip")
	if s := diffScript(a.Tables, b.Tables); s != "" {
		t.Fatalf("identical tables differ:\n%s", s)
	}
	tb := proxytest.Table()
	web := &tb.Frontends[3]
	web.Backends = web.Backends[:1]
	c := Render(tb, "flip")
	s := diffScript(a.Tables, c.Tables)
	golden(t, "flip-remove-backend.rules", s)
	if strings.Contains(s, "*filter") {
		t.Errorf("filter table rewritten although unchanged:\n%s", s)
	}
}

// Chain names fit iptables' 28 characters.
func TestChainNames(t *testing.T) {
	tb := &service.Table{Frontends: proxytest.Table().Frontends}
	for _, host := range []string{"flip", "flap"} {
		for table, chains := range Render(tb, host).Tables {
			for name := range chains {
				if len(name) > 28 {
					t.Errorf("%s: chain %s is %d characters long", table, name, len(name))
				}
			}
		}
	}
}

// A dual-stack table: the IPv4 chains are Table's own, unchanged; the
// IPv6 frontends render into ip6tables' tables, their counterparts.
func TestRenderDualStack(t *testing.T) {
	v4 := Render(proxytest.Table(), "flip")
	st := Render(proxytest.DualTable(), "flip")
	if s := diffScript(v4.Tables, st.Tables); s != "" {
		t.Errorf("the IPv4 chains changed with IPv6 frontends beside them:\n%s", s)
	}
	if v4.Tables6 != nil {
		t.Errorf("an IPv4 table rendered ip6tables chains")
	}
	script := rebuildFamily(map[string]string{}, st.Tables6, 6)
	golden(t, "flip6.rules", script)
	for _, bad := range []string{"/32", "255.255.255.255", "icmp-port-unreachable", "10."} {
		if strings.Contains(script, bad) {
			t.Errorf("ip6tables rules hold %q", bad)
		}
	}
	if len(st.UDP) != 2 {
		t.Errorf("UDP frontends %v, want both families'", st.UDP)
	}
}
