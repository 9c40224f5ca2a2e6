package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cnlab/cnlab"

// layers lists cnlab's packages from the top of the import graph down,
// one layer per line: a package imports only packages of the layers below
// its own, never one of its own layer or above. Every package of the
// module is listed once, except the test helpers (testOnly). This list is
// the one place to change when a package is added or an import moves;
// docs/design.md's package table lists the packages in the same order
// (TestDesignTableOrder).
var layers = [][]string{
	{"cmd/cnlab"},
	{"experiment"},
	{"kube", "cluster"},
	{"lab"},
	{"l7proxy/deploy", "l7proxy/haproxy"},
	{"probe"},
	{"proxy/registry"},
	{"proxy/ebpf", "proxy/iptables", "proxy/nftables"},
	{"datapath/registry"},
	{"datapath/ebpf", "datapath/iptables", "datapath/nftables"},
	{"proxy", "datapath"},
	{"service", "observe"},
	{"policy"},
	{"internal/change"},
	{"l7proxy"},
	{"l7"},
	{"labgraph"},
	{"topology"},
	{"profile"},
	{"report"},
	{"experiment/results"},
	{"datapath/kind"},
	{"internal/k8sdoc"},
	{"traffic", "stats", "report/plot", "labels", "internal/nsforward", "internal/nflog"},
	{"internal/netns"},
	{"internal/input", "internal/rundir", "internal/files", "internal/yamlx", "internal/bpffs",
		"internal/plural", "internal/buildinfo", "internal/fault", "internal/layers", "internal/kpki", "internal/kpshape", "internal/daemon"},
}

// testOnly are the packages only tests import: they may import any
// package but cmd/cnlab, and no other package imports them.
var testOnly = []string{"internal/testutil", "internal/k8stest", "internal/scenarios", "internal/svcscenarios", "policy/policytest", "proxy/proxytest", "internal/kpshape/fidelity"}

type pkg struct {
	ImportPath string
	Imports    []string
}

// packages lists the module's packages with their imports of the module
// (tests' imports left out: a test may use a package above its own).
func packages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		p.ImportPath = short(p.ImportPath)
		var own []string
		for _, imp := range p.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				own = append(own, short(imp))
			}
		}
		p.Imports = own
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func short(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

// layerOf maps each listed package to its layer (0 the top).
func layerOf(t *testing.T) map[string]int {
	t.Helper()
	m := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			if _, ok := m[p]; ok {
				t.Errorf("%s is listed twice", p)
			}
			m[p] = i
		}
	}
	for _, p := range testOnly {
		if _, ok := m[p]; ok {
			t.Errorf("%s is listed in a layer and as test-only", p)
		}
	}
	return m
}

// TestNoImportUpward fails when a package imports one of its own layer or
// above, when a package is not listed, and when a listed one is gone.
func TestNoImportUpward(t *testing.T) {
	layer := layerOf(t)
	seen := map[string]bool{}
	for _, p := range packages(t) {
		seen[p.ImportPath] = true
		if slices.Contains(testOnly, p.ImportPath) {
			for _, imp := range p.Imports {
				if imp == "cmd/cnlab" {
					t.Errorf("test helper %s imports cmd/cnlab", p.ImportPath)
				}
			}
			continue
		}
		l, ok := layer[p.ImportPath]
		if !ok {
			t.Errorf("package %s is in no layer: add it to the list in internal/layers/layers_test.go and a row of docs/design.md's package table", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if slices.Contains(testOnly, imp) {
				t.Errorf("%s imports the test helper %s", p.ImportPath, imp)
				continue
			}
			if li, ok := layer[imp]; ok && li <= l {
				rel := "a layer above it"
				if li == l {
					rel = "its own layer"
				}
				t.Errorf("%s imports %s, of %s", p.ImportPath, imp, rel)
			}
		}
	}
	for p := range layer {
		if !seen[p] {
			t.Errorf("listed package %s does not exist", p)
		}
	}
	for _, p := range testOnly {
		if !seen[p] {
			t.Errorf("listed test helper %s does not exist", p)
		}
	}
}

// TestDesignTableOrder checks that docs/design.md's package table names
// every package of the layers (the test helpers need not be named), in
// their order: a package of a lower
// layer is never in a row above one of a higher layer.
func TestDesignTableOrder(t *testing.T) {
	data, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "\n## Packages\n")
	if !ok {
		t.Fatal("docs/design.md has no Packages section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	name := regexp.MustCompile("`([a-z0-9/]+)`")
	row := map[string]int{}
	n := 0
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			row[m[1]] = n
		}
		n++
	}
	layer := layerOf(t)
	for p := range layer {
		if _, ok := row[p]; !ok {
			t.Errorf("docs/design.md's package table has no row naming %s", p)
		}
	}
	for a, la := range layer {
		for b, lb := range layer {
			ra, oka := row[a]
			rb, okb := row[b]
			if oka && okb && la < lb && ra > rb {
				t.Errorf("docs/design.md lists %s (row %d) below %s (row %d), but its layer is above", a, ra+1, b, rb+1)
			}
		}
	}
}
