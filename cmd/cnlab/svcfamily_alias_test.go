package main

import (
	"os"
	"testing"

	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// TestServiceFamilyAliases: every --family value parseFamily accepts
// for the probe of every pair (ipv6, v6, all, Both...) is accepted by
// probe --service and service trace too (serviceFrontends), and names
// the same family. Pure: no kernel.
func TestServiceFamilyAliases(t *testing.T) {
	data, err := os.ReadFile("../../examples/dual-stack.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := topology.Parse(data, "dual-stack.yaml", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	svcs, sls, err := service.Parse([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: x}\nspec:\n  ipFamilyPolicy: PreferDualStack\n  selector: {app: web}\n  ports: [{port: 80}]\n"), "web.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := service.Resolve(spec, svcs, sls, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range []string{"4", "6", "both", "ipv6", "v6", "IPv4", "all", "Both"} {
		if _, perr := parseFamily(fam); perr != nil {
			continue // the pair probe refuses it too: consistent
		}
		fs, _, err := serviceFrontends(r, "x/web", fam, false)
		if err != nil {
			t.Errorf("--family %q: the pair probe accepts it, probe --service refuses it: %v", fam, err)
			continue
		}
		want, _ := parseFamily(fam)
		if (want == 0) != (len(fs) == 2) || want != 0 && fs[0].Family() != want {
			t.Errorf("--family %q: %d frontends, the first IPv%d", fam, len(fs), fs[0].Family())
		}
	}
}
