package nftables

import (
	"flag"
	"os"
	"path/filepath"
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
