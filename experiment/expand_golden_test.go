package experiment

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
)

var update = flag.Bool("update", false, "rewrite testdata/expansion.golden")

// Every shipped experiment file (experiments/, the built-in default) with
// --quick, and two as run in full, parse to the same Spec (as
// results.json records it) and expand to the same points: IDs, series,
// labels, workloads and every parameter (testdata/expansion.golden; go
// test -run TestExpansionGolden -update rewrites it after an intended
// change).
func TestExpansionGolden(t *testing.T) {
	files, err := filepath.Glob("../experiments/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no experiment files: %v", err)
	}
	var b bytes.Buffer
	type run struct {
		file  string
		quick bool
	}
	runs := []run{{"default.yaml", false}, {"../experiments/seed004-services.yaml", false}}
	for _, f := range append(files, "default.yaml") {
		runs = append(runs, run{f, true})
	}
	for _, r := range runs {
		data, err := os.ReadFile(r.file)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "== %s quick=%v\n", r.file, r.quick)
		backend := "" // a lab; k8s-*.yaml and *-cluster.yaml are the kubernetes backend's
		if base := filepath.Base(r.file); strings.HasPrefix(base, "k8s-") || strings.HasSuffix(base, "-cluster.yaml") {
			backend = results.BackendKubernetes
		}
		s, err := ParseFor(data, r.file, r.quick, backend)
		if err != nil {
			t.Fatalf("%s: %v", r.file, err)
		}
		js, _ := json.Marshal(s.Spec)
		fmt.Fprintf(&b, "spec %s\n", js)
		pts, err := s.Points()
		if err != nil {
			t.Fatalf("%s: %v", r.file, err)
		}
		for _, p := range pts {
			params, _ := json.Marshal(p.Params)
			fmt.Fprintf(&b, "%s | %s | %s | %s | %d %s\n", p.ID, p.Series, p.Params.Text(), p.Workload.Name(), p.Repetitions, params)
		}
	}
	const golden = "testdata/expansion.golden"
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		got, exp := bytes.Split(b.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range min(len(got), len(exp)) {
			if !bytes.Equal(got[i], exp[i]) {
				t.Fatalf("%s line %d:\n got  %s\n want %s", golden, i+1, got[i], exp[i])
			}
		}
		t.Fatalf("%s: %d lines, want %d", golden, len(got), len(exp))
	}
}
