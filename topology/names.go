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
