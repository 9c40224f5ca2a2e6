package deploy

import (
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

func TestBuild(t *testing.T) {
	lab, c := policytest.Compile(t, scenarios.L7[2].Policies, topology.Overrides{}) // GET /public, and L3/L4 from y
	if cfg := Build(lab, "flap", c); cfg != nil {
		t.Errorf("flap has no L7 port, but gets %+v", cfg)
	}
	cfg := Build(lab, "flip", c)
	if cfg == nil || len(cfg.Ports) != 1 || cfg.Ports[0].Endpoint != "x/a" || cfg.Ports[0].Port != 80 || cfg.Set != c.Set {
		t.Fatalf("flip: %+v", cfg)
	}
	byNS := map[string]int{}
	for _, p := range cfg.Ports[0].Peers {
		if p.CIDR.IsValid() {
			t.Errorf("a CIDR peer with no CIDR rule: %+v", p)
			continue
		}
		id := c.Identity(p.Identity)
		byNS[id.Namespace]++
		switch id.Namespace {
		case "x": // GET /public only
			if len(p.Rules) != 1 || p.Rules[0].Method != "GET" || p.Rules[0].Path != "/public" {
				t.Errorf("x identity %d: %+v", p.Identity, p.Rules)
			}
		case "y": // allowed at L3/L4: every request
			if len(p.Rules) != 1 || p.Rules[0].Method != "" || p.Rules[0].Path != "" {
				t.Errorf("y identity %d: %+v", p.Identity, p.Rules)
			}
		default:
			t.Errorf("identity %d of namespace %s gets rules: %+v", p.Identity, id.Namespace, p.Rules)
		}
	}
	if byNS["x"] != 3 || byNS["y"] != 3 {
		t.Errorf("peers per namespace %v, want 3 of x and 3 of y", byNS)
	}
	if len(cfg.Identities) != len(lab.Endpoints) {
		t.Errorf("%d addresses in the identity table, want %d", len(cfg.Identities), len(lab.Endpoints))
	}
}
