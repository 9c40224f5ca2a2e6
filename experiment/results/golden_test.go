package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Reading a results directory and writing it again changes no byte of
// results.json, results.csv or environment.json (testdata/README.md).
func TestGoldenRoundTrip(t *testing.T) {
	for _, c := range []struct{ dir, csv string }{
		{"testdata/full", "testdata/full/results.csv"},
		{"../../report/testdata/run", "testdata/report-fixture.csv"},
	} {
		r, err := Load(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		if err := r.Write(out); err != nil {
			t.Fatal(err)
		}
		same(t, filepath.Join(c.dir, "results.json"), filepath.Join(out, "results.json"))
		same(t, c.csv, filepath.Join(out, "results.csv"))
	}
	// Params.Text, from the table of axes, says what it said.
	r, err := Load("testdata/full")
	if err != nil {
		t.Fatal(err)
	}
	var texts strings.Builder
	for _, p := range r.Points {
		texts.WriteString(p.ID + " " + p.Params.Text() + "\n")
	}
	if want, _ := os.ReadFile("testdata/full/texts.txt"); texts.String() != string(want) {
		t.Errorf("Params.Text:\n%s\nwant (testdata/full/texts.txt):\n%s", texts.String(), want)
	}
	env, err := LoadEnvironment("testdata/full")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := env.Write(out); err != nil {
		t.Fatal(err)
	}
	same(t, "testdata/full/environment.json", filepath.Join(out, "environment.json"))
	if env.Cluster == nil || env.Offloads["tso"] != "on" {
		t.Errorf("environment.json read back without its cluster or offloads: %+v", env)
	}
}

func same(t *testing.T, want, got string) {
	t.Helper()
	a, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		t.Errorf("%s written again differs from %s at byte %d: %q, want %q", got, want, i, b[i:min(i+80, len(b))], a[i:min(i+80, len(a))])
	}
}
