package topology

import (
	"fmt"
	"strings"
)

// Every network namespace of a lab is named "cnlab.LAB.KIND.NAME...". Names
// of labs, hosts, Kubernetes namespaces and endpoints are DNS labels, which
// never contain a dot, so the lab of any namespace can be read back from its
// name alone: teardown needs nothing but the kernel's state.
const (
	NetnsPrefix = "cnlab."
	HostBridge  = "br0"
)

// EndpointsPerBridge is how many endpoints a host puts on one bridge. A
// Linux bridge has at most 1023 ports (BR_MAX_PORTS, 1024, less port
// number 0: adding another fails with EXFULL, "exchange full"), so a host
// with more endpoints gets leaf bridges br1, br2, ..., each with the next
// EndpointsPerBridge of its endpoints in file order; the first stay on
// br0, so a lab of up to that many endpoints per host is built as ever.
const EndpointsPerBridge = 1000

// bridgeEndpoints is EndpointsPerBridge, lowered by tests to build leaves
// with a few endpoints.
var bridgeEndpoints = EndpointsPerBridge

// LeafBridge names a host's k-th leaf bridge (k >= 1).
func LeafBridge(k int) string { return fmt.Sprintf("br%d", k) }

// LabNetnsPrefix is the prefix shared by all namespaces of a lab.
func LabNetnsPrefix(lab string) string { return NetnsPrefix + lab + "." }

// HostNetns names a host's namespace.
func HostNetns(lab, host string) string { return LabNetnsPrefix(lab) + "host." + host }

// EndpointNetns names an endpoint's namespace.
func EndpointNetns(lab, ns, name string) string {
	return LabNetnsPrefix(lab) + "ep." + ns + "." + name
}

// HopNetns names the i-th forwarding namespace of a chain (1-based).
func HopNetns(lab string, i int) string { return fmt.Sprintf("%shop.%d", LabNetnsPrefix(lab), i) }

// SwitchNetns names the namespace holding the bridge of chain segment i.
func SwitchNetns(lab string, i int) string { return fmt.Sprintf("%ssw.%d", LabNetnsPrefix(lab), i) }

// LabOfNetns returns the lab a cnlab namespace belongs to, or "".
func LabOfNetns(name string) string {
	if !strings.HasPrefix(name, NetnsPrefix) {
		return ""
	}
	parts := strings.SplitN(strings.TrimPrefix(name, NetnsPrefix), ".", 2)
	if len(parts) != 2 || parts[0] == "" {
		return ""
	}
	return parts[0]
}
