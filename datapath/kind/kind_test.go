package kind

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/input"
)

func TestParseListsTheKinds(t *testing.T) {
	for _, k := range All() {
		if got, err := Parse(string(k)); err != nil || got != k {
			t.Errorf("Parse(%s) = %v, %v", k, got, err)
		}
	}
	_, err := Parse("cilium")
	if err == nil || !strings.Contains(err.Error(), `"cilium"`) || !strings.Contains(err.Error(), Names()) {
		t.Errorf("unknown kind: %v", err)
	}
	if _, err := Parse(string(None)); err == nil {
		t.Error("none is not a datapath a lab may ask for")
	}
	if Get(Default) == nil {
		t.Errorf("the default %s has no descriptor", Default)
	}
}

func TestResolveRefusesAnotherKindsOptions(t *testing.T) {
	n := 10
	_, err := Resolve("f.yaml", NFTables, RawOptions{IPTables: &RawIPTables{Filler: &n}})
	if !input.Is(err) || !strings.Contains(err.Error(), "f.yaml: iptables: options for the iptables datapath, but the lab's datapath is nftables") {
		t.Errorf("iptables options on nftables: %v", err)
	}
	_, err = Resolve("f.yaml", IPTables, RawOptions{EBPF: &RawEBPF{}})
	if !input.Is(err) || !strings.Contains(err.Error(), "f.yaml: ebpf: ") {
		t.Errorf("ebpf options on iptables: %v", err)
	}
	big := MaxMaxEndpoints + 1
	_, err = Resolve("f.yaml", EBPF, RawOptions{EBPF: &RawEBPF{MaxEndpoints: &big}})
	if !input.Is(err) || !strings.Contains(err.Error(), "ebpf.maxEndpoints: ") {
		t.Errorf("maxEndpoints out of range: %v", err)
	}
	o, err := Resolve("f.yaml", EBPF, RawOptions{})
	if err != nil || o.EBPF.HostRouting != HostRoutingBPF || o.IPTables.Backend != BackendLegacy || o.EBPF.MaxEndpoints != DefaultMaxEndpoints {
		t.Errorf("defaults: %+v %v", o, err)
	}
}

func TestOverridesNameTheirFlag(t *testing.T) {
	var raw RawOptions
	err := Overrides{HostRouting: HostRoutingLegacy}.Apply(IPTables, &raw)
	if !input.Is(err) || !strings.HasPrefix(err.Error(), "--host-routing: ") {
		t.Errorf("--host-routing on iptables: %v", err)
	}
	n := 3
	err = Overrides{Filler: &n}.Apply(EBPF, &raw)
	if !input.Is(err) || !strings.HasPrefix(err.Error(), "--filler: ") {
		t.Errorf("--filler on ebpf: %v", err)
	}
	if err := (Overrides{Filler: &n, FillerMode: FillerTopOfChain}).Apply(IPTables, &raw); err != nil || *raw.IPTables.Filler != 3 || raw.IPTables.FillerMode != FillerTopOfChain {
		t.Errorf("filler on iptables: %+v %v", raw.IPTables, err)
	}
	err = Overrides{Peers: PeersIPSets}.Apply(NFTables, &raw)
	if !input.Is(err) || !strings.HasPrefix(err.Error(), "--ipsets: ") {
		t.Errorf("--ipsets on nftables: %v", err)
	}
	if err := (Overrides{Peers: PeersIPSets}).Apply(IPTables, &raw); err != nil || raw.IPTables.Peers != PeersIPSets || *raw.IPTables.Filler != 3 {
		t.Errorf("ipsets on iptables: %+v %v", raw.IPTables, err)
	}
}

func TestResolvePeers(t *testing.T) {
	o, err := Resolve("f.yaml", IPTables, RawOptions{})
	if err != nil || o.IPTables.Peers != PeersAddresses || o.IPTables.IPSets() {
		t.Errorf("default peers: %+v %v", o.IPTables, err)
	}
	o, err = Resolve("f.yaml", IPTables, RawOptions{IPTables: &RawIPTables{Peers: PeersIPSets}})
	if err != nil || !o.IPTables.IPSets() {
		t.Errorf("peers ipsets: %+v %v", o.IPTables, err)
	}
	_, err = Resolve("f.yaml", IPTables, RawOptions{IPTables: &RawIPTables{Peers: "sets"}})
	if !input.Is(err) || err.Error() != `f.yaml: iptables.peers: unknown mode "sets" (addresses, ipsets)` {
		t.Errorf("bad peers: %v", err)
	}
	if got := IPTables.Describe(&Options{IPTables: IPTablesOptions{Backend: BackendLegacy, Peers: PeersIPSets}}); got != "legacy backend, peers in ipsets" {
		t.Errorf("describe ipsets: %q", got)
	}
}

func TestDescribeAndView(t *testing.T) {
	o, _ := Resolve("f", IPTables, RawOptions{})
	if got := IPTables.Describe(&o); got != "legacy backend" {
		t.Errorf("iptables: %q", got)
	}
	if v := NFTables.View(&o); v.IPTables != nil || v.EBPF != nil {
		t.Errorf("nftables view has options: %+v", v)
	}
	if v := EBPF.View(&o); v.EBPF == nil || v.IPTables != nil {
		t.Errorf("ebpf view: %+v", v)
	}
	if restore, _, _ := (IPTablesOptions{Backend: BackendNFT}).Tools(); restore != "iptables-nft-restore" {
		t.Errorf("nft backend restores with %s", restore)
	}
}

// Missing names a program by its Debian package; a program every machine
// lacks makes the kind unavailable.
func TestMissingNamesThePackage(t *testing.T) {
	d := Get(NFTables)
	saved := d.needs
	t.Cleanup(func() { d.needs = saved })
	d.needs = func(*Options) []string { return []string{"nft-not-a-real-program"} }
	if got := NFTables.Missing(&Options{}); !strings.Contains(got, "nft-not-a-real-program is not installed") {
		t.Errorf("Missing = %q", got)
	}
}

// The pairs of datapath and service proxy, and why each refused pair is
// refused, as the descriptors declare them. The messages are part of the
// CLI's contract: they must read as they did when the pairing lists were
// kept by the proxies.
func TestPairs(t *testing.T) {
	const (
		netfilterOnEBPF = "the %s service proxy translates in netfilter's PREROUTING, after the eBPF datapath's programs judged the packet against the service address instead of the backend; use --service-proxy ebpf with the ebpf datapath"
		ebpfElsewhere   = "the ebpf service proxy is the eBPF datapath's own programs: it needs the ebpf datapath (--datapath ebpf), not %s"
		needsHosts      = "the %s service proxy needs a lab with hosts (an iptables or nftables datapath), not datapath %s"
	)
	for _, c := range []struct {
		p    Proxy
		k    Kind
		want string
	}{
		{ProxyIPTables, IPTables, ""},
		{ProxyIPTables, NFTables, ""},
		{ProxyNFTables, IPTables, ""},
		{ProxyNFTables, NFTables, ""},
		{ProxyEBPF, EBPF, ""},
		{ProxyNone, IPTables, ""},
		{ProxyNone, EBPF, ""},
		{ProxyNone, None, ""},
		{ProxyIPTables, EBPF, fmt.Sprintf(netfilterOnEBPF, "iptables")},
		{ProxyNFTables, EBPF, fmt.Sprintf(netfilterOnEBPF, "nftables")},
		{ProxyEBPF, IPTables, fmt.Sprintf(ebpfElsewhere, "iptables")},
		{ProxyEBPF, NFTables, fmt.Sprintf(ebpfElsewhere, "nftables")},
		{ProxyEBPF, None, fmt.Sprintf(ebpfElsewhere, "none")},
		{ProxyIPTables, None, fmt.Sprintf(needsHosts, "iptables", "none")},
		{ProxyNFTables, None, fmt.Sprintf(needsHosts, "nftables", "none")},
	} {
		if got := c.p.Pairs(c.k); got != c.want {
			t.Errorf("%s on %s: %q, want %q", c.p, c.k, got, c.want)
		}
	}
	for k, want := range map[Kind]Proxy{IPTables: ProxyIPTables, NFTables: ProxyNFTables, EBPF: ProxyEBPF, None: ProxyNone, "bogus": ProxyNone} {
		if got := DefaultProxy(k); got != want {
			t.Errorf("DefaultProxy(%s) = %s, want %s", k, got, want)
		}
	}
	// Every kind pairs with its default proxy.
	for _, k := range All() {
		if why := DefaultProxy(k).Pairs(k); why != "" {
			t.Errorf("%s refuses its default proxy %s: %s", k, DefaultProxy(k), why)
		}
	}
	if got := ProxyChoices(); got != "iptables, nftables or ebpf" {
		t.Errorf("ProxyChoices() = %q", got)
	}
}

// A registered kind is a kind like the built-in ones until it is removed:
// Parse, All, Names and the pairing see it, and the messages that list
// kinds name it.
func TestRegister(t *testing.T) {
	before := All()
	remove, err := Register(Descriptor{Kind: "stand-in", Summary: "a test's", Proxies: []Proxy{ProxyNFTables}, DefaultProxy: ProxyNFTables})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := Parse("stand-in"); err != nil || k != "stand-in" {
		t.Errorf("Parse(stand-in) = %v, %v", k, err)
	}
	if got := All(); len(got) != len(before)+1 || got[len(before)] != "stand-in" {
		t.Errorf("All() = %v", got)
	}
	if _, err := Parse("cilium"); err == nil || !strings.Contains(err.Error(), "ebpf, stand-in)") {
		t.Errorf("unknown kind: %v", err)
	}
	if DefaultProxy("stand-in") != ProxyNFTables || ProxyIPTables.Pairs("stand-in") == "" || ProxyNFTables.Pairs("stand-in") != "" {
		t.Error("pairing of the registered kind")
	}
	if got := ProxyNFTables.Pairs(None); !strings.Contains(got, "(an iptables, nftables or stand-in datapath)") {
		t.Errorf("nftables on none: %q", got)
	}
	if Kind("stand-in").Missing(&Options{}) != "" {
		t.Error("a kind without tools misses something")
	}
	for _, bad := range []Descriptor{
		{Kind: "stand-in"}, {Kind: IPTables}, {Kind: None}, {},
		{Kind: "x", Proxies: []Proxy{"ipvs"}},
		{Kind: "x", DefaultProxy: ProxyEBPF},
	} {
		if _, err := Register(bad); err == nil {
			t.Errorf("Register(%+v) succeeded", bad)
		}
	}
	remove()
	if _, err := Parse("stand-in"); err == nil || !slices.Equal(All(), before) {
		t.Errorf("after remove: %v %v", All(), err)
	}
}

func TestProxyDatapaths(t *testing.T) {
	for p, want := range map[Proxy][]Kind{ProxyIPTables: {IPTables, NFTables}, ProxyNFTables: {IPTables, NFTables}, ProxyEBPF: {EBPF}, ProxyNone: All()} {
		if got := p.Datapaths(); !slices.Equal(got, want) {
			t.Errorf("%s pairs with %v, want %v", p, got, want)
		}
	}
	for p, want := range map[Proxy]Kind{ProxyIPTables: IPTables, ProxyNFTables: NFTables, ProxyEBPF: EBPF, "bogus": ""} {
		if got := p.Home(); got != want {
			t.Errorf("%s.Home() = %s, want %s", p, got, want)
		}
	}
	if got := ServingProxies(); !slices.Equal(got, []Proxy{ProxyIPTables, ProxyNFTables, ProxyEBPF}) {
		t.Errorf("ServingProxies() = %v", got)
	}
}
