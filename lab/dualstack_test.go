package lab

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// familyLab brings the scenario lab up in the families given on
// datapath dp (a wire between its hosts).
func familyLab(t *testing.T, name, dp string, fams ...int) *topology.Spec {
	t.Helper()
	testutil.RequireTool(t, "ip6tables-legacy-restore", "iptables")
	return scenarioLabYAML(t, name, dp, scenarios.LabFor(fams...))
}

// TestScenariosDualStack runs the scenario table on dual-stack and
// IPv6-only labs on every enforcing datapath: every cell of every family
// probed with real connections must be what the model says for the
// addresses of that family. A third of the table runs (every scenario
// naming IPv6 among them); TestScenarios runs all of it over IPv4.
func TestScenariosDualStack(t *testing.T) {
	for _, dp := range enforcingKinds() {
		for _, lab := range []struct {
			name string
			fams []int
		}{{"ds", []int{4, 6}}, {"v6", []int{6}}} {
			t.Run(dp+"-"+lab.name, func(t *testing.T) {
				spec := familyLab(t, "t-fam-"+shortName(dp)+"-"+lab.name, dp, lab.fams...)
				for i, sc := range scenarios.All {
					if i%3 != 0 && !strings.Contains(sc.Name, "IPv6") {
						continue
					}
					pols, err := applyScenario(t, spec, sc)
					if err != nil {
						t.Fatalf("%s: apply: %v", sc.Name, err)
					}
					checkMatrixFamilies(t, sc.Name, spec, pols)
				}
			})
		}
	}
}

// checkMatrixFamilies probes every pair over every family of the lab and
// compares each cell with the model's verdict for that family.
func checkMatrixFamilies(t *testing.T, name string, spec *topology.Spec, pols []*policy.Policy) {
	t.Helper()
	m, err := policy.NewModel(spec, pols)
	if err != nil {
		t.Fatal(err)
	}
	cells, err := probe.Run(context.Background(), spec, targets(), probe.Options{Timeout: 750 * time.Millisecond})
	if err != nil {
		t.Fatalf("%s: probe: %v", name, err)
	}
	seen, bad := map[int]int{}, 0
	for _, c := range cells {
		src, _ := spec.Endpoint(c.From)
		dst, _ := spec.Endpoint(c.To)
		seen[c.Family]++
		v, ok := m.VerdictFamily(src, dst, c.Family, c.Protocol, c.Port)
		if !ok {
			t.Fatalf("%s: %s -> %s: no IPv%d verdict", name, c.From, c.To, c.Family)
		}
		if c.Error != "" {
			t.Errorf("%s: IPv%d %s -> %s %s/%d: %s", name, c.Family, c.From, c.To, c.Protocol, c.Port, c.Error)
		}
		if c.Allowed != v.Allowed {
			if bad++; bad <= 6 {
				t.Errorf("%s: IPv%d %s -> %s %s/%d: probed allowed=%v, model says %v (egress: %s; ingress: %s)",
					name, c.Family, c.From, c.To, c.Protocol, c.Port, c.Allowed, v.Allowed, v.Egress.Reason, v.Ingress.Reason)
			}
		}
	}
	if bad > 6 {
		t.Errorf("%s: %d cells differ in all", name, bad)
	}
	for _, f := range spec.Families() {
		if want := len(spec.Endpoints) * (len(spec.Endpoints) - 1) * len(targets()); seen[f] != want {
			t.Errorf("%s: %d IPv%d cells probed, want %d", name, seen[f], f, want)
		}
	}
	if len(seen) != len(spec.Families()) {
		t.Errorf("%s: families probed %v, the lab has %v", name, fmt.Sprint(seen), spec.Families())
	}
}
