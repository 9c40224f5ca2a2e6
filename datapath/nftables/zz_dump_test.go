package nftables

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
)

func TestZZDump(t *testing.T) {
	out := map[string]any{}
	all := append([]scenarios.Scenario{}, scenarios.All...)
	for _, l := range scenarios.L7 {
		all = append(all, scenarios.Scenario{Name: l.Name, Policies: l.Policies})
	}
	for _, sc := range all {
		lab, c := compiled(t, sc.Policies)
		for _, h := range []string{"flip", "flap"} {
			out[sc.Name+"/"+h] = Render(lab, h, c)
		}
	}
	out["skeleton"] = skeleton()
	out["rebuild"] = rebuildScript(3, 4, map[string][]string{"in_enf": {"1.2.3.4"}})
	out["drop"] = dropGeneration(2)
	b, _ := json.MarshalIndent(out, "", " ")
	os.WriteFile(os.Getenv("DUMP"), b, 0o644)
}
