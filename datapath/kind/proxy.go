package kind

import (
	"fmt"
	"strings"
)

// Proxy names a service proxy implementation, as topology files
// (services.proxy) and --service-proxy write it.
type Proxy string

// The service proxies.
const (
	ProxyIPTables Proxy = "iptables" // kube-proxy's iptables mode: a chain per service and per endpoint
	ProxyNFTables Proxy = "nftables" // kube-proxy's nftables mode: one verdict map, numgen per service
	ProxyEBPF     Proxy = "ebpf"     // cnlab's eBPF datapath translating per packet: one hash lookup per new connection
	ProxyNone     Proxy = "none"     // no Services: service apply is refused
)

// proxyDescriptor is what a proxy kind is without the kernel.
type proxyDescriptor struct {
	Proxy   Proxy
	Summary string
	// datapaths lists the policy datapaths it works with (nil: any).
	datapaths []Kind
	tools     func(o *Options) []string
}

var proxies = []proxyDescriptor{
	{ProxyIPTables, "kube-proxy's iptables layout: KUBE-SERVICES walked rule by rule, statistic per endpoint",
		[]Kind{IPTables, NFTables}, func(o *Options) []string { r, s, b := o.IPTables.Tools(); return []string{r, s, b} }},
	{ProxyNFTables, "kube-proxy's nftables layout: one verdict-map lookup, numgen per service",
		[]Kind{IPTables, NFTables}, func(*Options) []string { return []string{"nft"} }},
	{ProxyEBPF, "the eBPF datapath's own: a hash lookup per new connection, translated per packet at the client's veth",
		[]Kind{EBPF}, func(*Options) []string { return nil }},
	{ProxyNone, "no service proxy", nil, nil},
}

// refusedProxies are names users may expect, with why cnlab has none.
var refusedProxies = map[string]string{
	"ipvs": "this kernel has no IPVS (CONFIG_IP_VS is not set, and it cannot load modules); " +
		"cnlab never approximates it under that name: nftables is the closest stand-in (one lookup per new connection)",
}

// Proxies lists the service proxies, in the order help text lists them.
func Proxies() []Proxy {
	out := make([]Proxy, len(proxies))
	for i, p := range proxies {
		out[i] = p.Proxy
	}
	return out
}

// ProxyNames returns the proxies' names joined for a message.
func ProxyNames() string {
	var s []string
	for _, p := range Proxies() {
		s = append(s, string(p))
	}
	return strings.Join(s, ", ")
}

// ParseProxy returns the proxy of that name; ipvs and the like are refused
// with the reason.
func ParseProxy(name string) (Proxy, error) {
	for _, p := range proxies {
		if string(p.Proxy) == name {
			return p.Proxy, nil
		}
	}
	if why, ok := refusedProxies[name]; ok {
		return "", fmt.Errorf("service proxy %q is not available: %s", name, why)
	}
	return "", fmt.Errorf("unknown service proxy %q (supported: %s)", name, ProxyNames())
}

// DefaultProxy is the proxy of a lab whose file names none: the lab's
// datapath's own (iptables, nftables, ebpf), none otherwise.
func DefaultProxy(k Kind) Proxy {
	switch k {
	case IPTables:
		return ProxyIPTables
	case NFTables:
		return ProxyNFTables
	case EBPF:
		return ProxyEBPF
	}
	return ProxyNone
}

func getProxy(p Proxy) *proxyDescriptor {
	for i := range proxies {
		if proxies[i].Proxy == p {
			return &proxies[i]
		}
	}
	return nil
}

// Summary says what the proxy is.
func (p Proxy) Summary() string {
	if d := getProxy(p); d != nil {
		return d.Summary
	}
	return ""
}

// Pairs says why proxy p cannot serve a lab of datapath k, "" when it can.
// A netfilter proxy translates in PREROUTING, after the eBPF datapath's tc
// programs judged the packet: eBPF policy would see the service address,
// not the backend, so the pair is refused.
func (p Proxy) Pairs(k Kind) string {
	d := getProxy(p)
	if d == nil || d.datapaths == nil {
		return ""
	}
	for _, ok := range d.datapaths {
		if ok == k {
			return ""
		}
	}
	if k == EBPF {
		return fmt.Sprintf("the %s service proxy translates in netfilter's PREROUTING, after the eBPF datapath's programs judged the packet against the service address instead of the backend; use --service-proxy ebpf with the ebpf datapath", p)
	}
	if p == ProxyEBPF {
		return fmt.Sprintf("the ebpf service proxy is the eBPF datapath's own programs: it needs the ebpf datapath (--datapath ebpf), not %s", k)
	}
	return fmt.Sprintf("the %s service proxy needs a lab with hosts (an iptables or nftables datapath), not datapath %s", p, k)
}

// Tools returns the programs the proxy runs with these options.
func (p Proxy) Tools(o *Options) []string {
	if d := getProxy(p); d != nil && d.tools != nil {
		return d.tools(o)
	}
	return nil
}
