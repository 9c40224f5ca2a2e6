package kind

import (
	"fmt"
	"slices"
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

// proxyDescriptor is what a proxy kind is without the kernel. Which
// datapaths it pairs with is said by the datapaths (Descriptor.Proxies).
type proxyDescriptor struct {
	Proxy   Proxy
	Summary string
	tools   func(o *Options) []string
	// anyDatapath: the proxy pairs with every datapath (none).
	anyDatapath bool
	// refuse says why the proxy cannot serve a lab of a datapath that does
	// not list it; nil: it needs one of the datapaths that list it.
	refuse func(k Kind) string
}

var proxies = []proxyDescriptor{
	{Proxy: ProxyIPTables, Summary: "kube-proxy's iptables layout: KUBE-SERVICES walked rule by rule, statistic per endpoint",
		tools: func(o *Options) []string { r, s, b := o.IPTables.Tools(); return []string{r, s, b} }},
	{Proxy: ProxyNFTables, Summary: "kube-proxy's nftables layout: one verdict-map lookup, numgen per service",
		tools: func(*Options) []string { return []string{"nft"} }},
	{Proxy: ProxyEBPF, Summary: "the eBPF datapath's own: a hash lookup per new connection, translated per packet at the client's veth",
		tools: func(*Options) []string { return nil },
		refuse: func(k Kind) string {
			return fmt.Sprintf("the %s service proxy is the eBPF datapath's own programs: it needs the %s datapath (--datapath %s), not %s", ProxyEBPF, EBPF, EBPF, k)
		}},
	{Proxy: ProxyNone, Summary: "no service proxy", anyDatapath: true},
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

// ServingProxies lists the proxies that serve Services: all but none.
func ServingProxies() []Proxy {
	var out []Proxy
	for _, p := range proxies {
		if !p.anyDatapath {
			out = append(out, p.Proxy)
		}
	}
	return out
}

// ProxyChoices returns the proxies a lab can serve Services with (all but
// none) for a message: "iptables, nftables or ebpf".
func ProxyChoices() string {
	var s []string
	for _, p := range ServingProxies() {
		s = append(s, string(p))
	}
	return orList(s)
}

// Datapaths lists the datapaths that pair with p, in All's order (none
// pairs with every datapath).
func (p Proxy) Datapaths() []Kind {
	pd := getProxy(p)
	var out []Kind
	for _, d := range table() {
		if pd != nil && (pd.anyDatapath || slices.Contains(d.Proxies, p)) {
			out = append(out, d.Kind)
		}
	}
	return out
}

// orList joins names as a sentence does: "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Home returns the datapath whose default service proxy is p, or else
// the first that pairs with it; "" when none pairs with it.
func (p Proxy) Home() Kind {
	ks := p.Datapaths()
	for _, k := range ks {
		if DefaultProxy(k) == p {
			return k
		}
	}
	if len(ks) == 0 {
		return ""
	}
	return ks[0]
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

// DefaultProxy is the proxy of a lab whose file names none: the one its
// datapath's descriptor names (the datapath's own), none otherwise.
func DefaultProxy(k Kind) Proxy {
	if d := Get(k); d != nil && d.DefaultProxy != "" {
		return d.DefaultProxy
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
// A pair is accepted when k's descriptor lists p (Descriptor.Proxies);
// otherwise the datapath says why it refuses p, or else the proxy says
// why it refuses k, or else the refusal names the datapaths that list p.
func (p Proxy) Pairs(k Kind) string {
	pd := getProxy(p)
	if pd == nil || pd.anyDatapath {
		return ""
	}
	d := Get(k)
	if d != nil && slices.Contains(d.Proxies, p) {
		return ""
	}
	if d != nil && d.refuseProxy != nil {
		return d.refuseProxy(p)
	}
	if pd.refuse != nil {
		return pd.refuse(k)
	}
	var with []string
	for _, k := range p.Datapaths() {
		with = append(with, string(k))
	}
	return fmt.Sprintf("the %s service proxy needs a lab with hosts (%s datapath), not datapath %s", p, article(orList(with)), k)
}

// article puts "a" or "an" before a name, as it is spoken ("an iptables").
func article(s string) string {
	if s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}

// Tools returns the programs the proxy runs with these options.
func (p Proxy) Tools(o *Options) []string {
	if d := getProxy(p); d != nil && d.tools != nil {
		return d.tools(o)
	}
	return nil
}
