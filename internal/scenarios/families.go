package scenarios

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	podCIDRLine = regexp.MustCompile(`podCIDR: 10\.0\.(\d+)\.0/24`)
	endpointIP  = regexp.MustCompile(`ip: 10\.0\.(\d+)\.(\d+)`)
)

// LabFor is Lab in the families given: "4" (Lab itself), "dual" (every
// host has 10.0.N.0/24 and fd00:0:N::/64, every endpoint 10.0.N.M and
// fd00:0:N::M) or "6" (the IPv6 ones only), so that each scenario can run
// over either family and both. The policies' IPv4 CIDRs match nothing
// over IPv6, as in a cluster.
func LabFor(families string) string {
	switch families {
	case "4":
		return Lab
	case "dual", "6":
	default:
		panic(fmt.Sprintf("scenarios.LabFor(%q): want 4, dual or 6", families))
	}
	l := podCIDRLine.ReplaceAllStringFunc(Lab, func(s string) string {
		n := podCIDRLine.FindStringSubmatch(s)[1]
		if families == "6" {
			return fmt.Sprintf("podCIDRs: ['fd00:0:%s::/64']", n)
		}
		return fmt.Sprintf("podCIDRs: [10.0.%s.0/24, 'fd00:0:%s::/64']", n, n)
	})
	l = endpointIP.ReplaceAllStringFunc(l, func(s string) string {
		m := endpointIP.FindStringSubmatch(s)
		if families == "6" {
			return fmt.Sprintf("ip: 'fd00:0:%s::%s'", m[1], m[2])
		}
		return fmt.Sprintf("ip: [10.0.%s.%s, 'fd00:0:%s::%s']", m[1], m[2], m[1], m[2])
	})
	return strings.Replace(l, "name: scen", "name: scen"+families, 1)
}
