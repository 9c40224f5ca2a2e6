package report

import (
	"go/parser"
	"go/token"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Drawing a results.json links nothing that touches the kernel: report and
// the results schema depend on no datapath, service proxy, lab, topology,
// netlink or eBPF package (datapath/kind, the kinds' pure descriptors,
// excepted), and cnlab's report and compare commands read results, not
// the runner.
func TestReportLinksNoKernelCode(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	const mod = "github.com/cnlab/cnlab/"
	out, err := exec.Command("go", "list", "-deps", mod+"report", mod+"experiment/results").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	banned := []string{mod + "datapath", mod + "proxy", mod + "lab", mod + "topology", mod + "experiment",
		mod + "internal/netns", mod + "profile", mod + "kube", "github.com/vishvananda/netlink", "github.com/cilium/ebpf"}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == mod+"datapath/kind" || pkg == mod+"experiment/results" {
			continue
		}
		for _, b := range banned {
			if pkg == b || strings.HasPrefix(pkg, b+"/") {
				t.Errorf("report or experiment/results depends on %s", pkg)
			}
		}
	}
	f, err := parser.ParseFile(token.NewFileSet(), "../cmd/cnlab/report.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == mod+"experiment" {
			t.Errorf("cmd/cnlab/report.go imports %s: report and compare read %sexperiment/results", p, mod)
		}
	}
}
