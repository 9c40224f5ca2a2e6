// Package ebpf binds the ebpf service proxy kind to the eBPF datapath's
// own service translation (datapath/ebpf.ServiceProxy): the programs that
// enforce policy translate connections to Services per packet, from maps
// this proxy writes. It pairs with the ebpf datapath only.
package ebpf

import (
	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/proxy"
)

// Descriptor binds the ebpf proxy kind to its implementation. It serves
// both families (IPv6 frontends have maps of their own).
var Descriptor = proxy.Descriptor{Kind: kind.ProxyEBPF, New: New, StateKind: ebpf.ServiceStateKind}

// New returns the eBPF service proxy.
func New() proxy.Proxy { return ebpf.ServiceProxy{} }
