package ebpf

import (
	"fmt"
	"sort"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// MapEntries renders, per host, what the policy maps hold for a compiled
// policy, one line per entry grouped by what holds it: "ipcache" (the
// address → identity entries) and each endpoint's ID (its isolation and
// its policy map entries), each group sorted. It is what policy apply
// --dry-run compares, and pure: no kernel.
func MapEntries(lab *topology.Spec, c *policy.Compiled) (map[string]map[string][]string, error) {
	plans, err := plan(lab, c)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string][]string{}
	for host, hp := range plans {
		groups := map[string][]string{}
		for _, e := range hp.IPCache {
			groups["ipcache"] = append(groups["ipcache"], fmt.Sprintf("%s key %d identity %d", e.Prefix, e.Key, e.Identity))
		}
		for _, ep := range hp.Endpoints {
			lines := []string{fmt.Sprintf("isolation %#x", uint32(ep.Enforce))}
			for _, e := range ep.Entries {
				lines = append(lines, fmt.Sprintf("%+v", e))
			}
			groups[ep.ID] = lines
		}
		for _, g := range groups {
			sort.Strings(g)
		}
		out[host] = groups
	}
	return out, nil
}
