package topology

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/input"
)

const good = `
name: demo
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wire}
namespaces:
  x: {labels: {ns: x}}
endpoints:
  - {name: a, namespace: x, host: flip, ip: 10.0.192.10, labels: {pod: a}, ports: [{name: http, port: 80}]}
  - {name: b, host: flip}
  - {name: c, host: flap}
`

func TestResolveGood(t *testing.T) {
	s, err := Parse([]byte(good), "good.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Datapath != "iptables" || s.MTU != 1500 {
		t.Errorf("defaults: datapath %q mtu %d", s.Datapath, s.MTU)
	}
	want := map[string]string{"x/a": "10.0.192.10", "default/b": "10.0.192.2", "default/c": "10.0.191.2"}
	for _, ep := range s.Endpoints {
		if ep.IP.String() != want[ep.ID()] {
			t.Errorf("%s: ip %s, want %s", ep.ID(), ep.IP, want[ep.ID()])
		}
		if !strings.HasPrefix(ep.Netns, "cnlab.demo.ep.") || len(ep.HostVeth) > 15 {
			t.Errorf("%s: netns %q veth %q", ep.ID(), ep.Netns, ep.HostVeth)
		}
	}
	if got := s.Endpoints[0].Ports[0]; got.Protocol != "TCP" || got.Port != 80 {
		t.Errorf("port defaults: %+v", got)
	}
	if s.Namespaces["x"].Labels[MetadataNameLabel] != "x" || s.Namespaces["default"].Labels[MetadataNameLabel] != "default" {
		t.Errorf("namespace labels: %v", s.Namespaces)
	}
	flip := s.Host("flip")
	if len(flip.Routes) != 1 || flip.Routes[0].Dst.String() != "10.0.191.0/24" || flip.Routes[0].Via.String() != "100.64.0.2" {
		t.Errorf("flip routes: %+v", flip.Routes)
	}
	// The spec is deterministic.
	s2, _ := Parse([]byte(good), "good.yaml", Overrides{})
	if !Same(s, s2) {
		t.Error("resolving the same file twice gave different specs")
	}
}

func TestResolveRoutesThroughTransitHost(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "examples", "three-hosts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(data, "three-hosts.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	a := s.Host("a")
	got := map[string]string{}
	for _, r := range a.Routes {
		got[r.Dst.String()] = r.Via.String() + " " + r.Dev
	}
	// a reaches c through b over the wire; b reaches c over the vxlan overlay.
	if got["10.2.0.0/24"] != "100.64.0.2 wire0" || got["10.3.0.0/24"] != "100.64.0.2 wire0" {
		t.Errorf("routes of a: %v", got)
	}
	b := s.Host("b")
	for _, r := range b.Routes {
		if r.Dst.String() == "10.3.0.0/24" {
			if r.Dev != "vxlan1" {
				t.Errorf("b reaches c via %s, want vxlan1", r.Dev)
			}
			return
		}
	}
	t.Errorf("b has no route to c: %+v", b.Routes)
}

func TestResolveChainLayout(t *testing.T) {
	s, err := Preset("chain", PresetOptions{Length: 3}, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Chain
	if len(c.Nodes) != 3 || len(c.Segments) != 4 {
		t.Fatalf("nodes %d segments %d", len(c.Nodes), len(c.Segments))
	}
	client, _ := s.Endpoint("client")
	server, _ := s.Endpoint("default/server")
	if client.IP.String() != "10.100.0.1" || client.Gateway.String() != "10.100.0.2" ||
		server.IP.String() != "10.100.3.2" || server.Gateway.String() != "10.100.3.1" {
		t.Errorf("client %s via %s, server %s via %s", client.IP, client.Gateway, server.IP, server.Gateway)
	}
	// Hop 2 sits between segments 1 and 2: it needs routes to segment 0
	// (left) and segment 3 (right) and nothing else.
	rs := c.Nodes[1].Routes
	if len(rs) != 2 || rs[0].Dst.String() != "10.100.0.0/24" || rs[0].Via.String() != "10.100.1.1" ||
		rs[1].Dst.String() != "10.100.3.0/24" || rs[1].Via.String() != "10.100.2.2" {
		t.Errorf("hop 2 routes: %+v", rs)
	}
}

func TestPresetsResolve(t *testing.T) {
	for _, p := range Presets() {
		if _, err := Preset(p, PresetOptions{}, Overrides{}); err != nil {
			t.Errorf("preset %s: %v", p, err)
		}
	}
	if _, err := Preset("multi-host", PresetOptions{Link: "vxlan"}, Overrides{Name: "mh2"}); err != nil {
		t.Error(err)
	}
}

func TestBadInput(t *testing.T) {
	hosts2 := "hosts:\n  - {name: flip, podCIDR: 10.0.192.0/24}\n  - {name: flap, podCIDR: 10.0.191.0/24}\n"
	linked := hosts2 + "links: [{between: [flip, flap]}]\n"
	many := "name: big\nhosts: [{name: h, podCIDR: 10.0.0.0/29}]\nendpoints:\n"
	for i := 0; i < 6; i++ {
		many += fmt.Sprintf("  - {name: e%d}\n", i)
	}
	cases := []struct {
		name, yaml, want string
	}{
		{"syntax", "name: [", "bad.yaml: "},
		{"empty", "", "bad.yaml: empty topology document"},
		{"not a mapping", "- a\n- b\n", "must be a mapping"},
		{"alias", "name: &n x\nhosts: [{name: *n, podCIDR: 10.0.0.0/24}]\n", "bad.yaml: hosts[0].name: aliases (*n) are not supported"},
		{"unknown top field", "name: x\nhostz: []\n", `bad.yaml: hostz: unknown field "hostz" (known fields: chain, datapath, ebpf, endpoints, hosts, iptables, l7Proxy, links, mtu, name, namespaces, observe, services, transitCIDR)`},
		{"bad l7Proxy size", "name: x\nl7Proxy: {maxHeaderBytes: 10}\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\n", `bad.yaml: l7Proxy.maxHeaderBytes: 10: give 1024 to 16777216`},
		{"bad l7Proxy duration", "name: x\nl7Proxy: {idleTimeout: soon}\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\n", `bad.yaml: l7Proxy.idleTimeout: "soon": give a duration from 10ms to 24h, such as 30s`},
		{"unknown l7Proxy field", "name: x\nl7Proxy: {maxBody: 1}\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\n", `l7Proxy`},
		{"bad observe level", "name: x\nobserve: verbose\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\n", `bad.yaml: observe: "verbose": give off, drops or all`},
		{"observe on a chain", "name: x\nobserve: drops\nchain: {length: 2}\n", `bad.yaml: observe: a chain has no policy datapath to observe`},
		{"unknown nested field", "name: x\nhosts:\n  - name: a\n    podCidr: 10.0.0.0/24\n", `bad.yaml: hosts[0].podCidr: unknown field "podCidr" (known fields: labels, name, podCIDR, podCIDRs)`},
		{"wrong type", "name: x\nmtu: big\n", `bad.yaml: mtu: expected an integer, got "big"`},
		{"two documents", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\n---\nname: y\n", "more than one YAML document"},
		{"missing name", "hosts: [{name: a, podCIDR: 10.0.0.0/24}]\n", "bad.yaml: name: is required"},
		{"bad lab name", "name: My_Lab\n", `bad.yaml: name: "My_Lab" must consist of lower case`},
		{"long lab name", "name: " + strings.Repeat("a", 25) + "\n", "longer than 24"},
		{"unknown datapath", "name: x\ndatapath: ovs\n", `bad.yaml: datapath: unknown datapath "ovs" (supported: iptables, nftables, ebpf)`},
		{"mtu range", "name: x\nmtu: 70000\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\n", "bad.yaml: mtu: 70000 is out of range"},
		{"no hosts", "name: x\n", "bad.yaml: hosts: at least one host is required"},
		{"bad cidr", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/33}]\n", `bad.yaml: hosts[0].podCIDR: "10.0.0.0/33" is not a CIDR`},
		{"host bits", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.5/24}]\n", "hosts[0].podCIDR: 10.0.0.5/24 has host bits set (did you mean 10.0.0.0/24?)"},
		{"ipv6 small mtu", "name: x\nmtu: 1200\nhosts: [{name: a, podCIDR: 'fd00::/64'}]\n", "bad.yaml: mtu: 1200 is below IPv6's minimum of 1280"},
		{"ipv6 shared /64", "name: x\nhosts: [{name: a, podCIDR: 'fd00::/120'}, {name: b, podCIDR: 'fd00::100/120'}]\n", "hosts[1].podCIDR: fd00::100/120 shares its /64 with hosts[0].podCIDR fd00::/120"},
		{"ipv6 too large", "name: x\nhosts: [{name: a, podCIDR: 'fd00::/48'}]\n", "an IPv6 podCIDR is a /64 to a /120"},
		{"ipv6 link-local", "name: x\nhosts: [{name: a, podCIDRs: ['fe80::/64']}]\n", "hosts[0].podCIDRs[0]: fe80::/64 overlaps the link-local"},
		{"two ipv4", "name: x\nhosts: [{name: a, podCIDRs: [10.0.1.0/24, 10.0.2.0/24]}]\n", "hosts[0].podCIDRs[1]: 10.0.2.0/24: a host has one prefix per family"},
		{"three prefixes", "name: x\nhosts: [{name: a, podCIDRs: [10.0.1.0/24, 'fd00::/64', 10.0.2.0/24]}]\n", "give one per family"},
		{"both keys", "name: x\nhosts: [{name: a, podCIDR: 10.0.1.0/24, podCIDRs: [10.0.1.0/24]}]\n", "give podCIDR or podCIDRs, not both"},
		{"families differ", "name: x\nhosts: [{name: a, podCIDRs: [10.0.1.0/24, 'fd00:1::/64']}, {name: b, podCIDR: 10.0.2.0/24}]\n", "hosts[1].podCIDR: IPv4, but hosts[0] (a) has IPv4 and IPv6"},
		{"v6 ip on v4 host", "name: x\nhosts: [{name: a, podCIDR: 10.0.1.0/24}]\nendpoints: [{name: e, ip: 'fd00::5'}]\n", "endpoints[0].ip: fd00::5 is IPv6 but host a's podCIDRs are IPv4"},
		{"two v4 ips", "name: x\nhosts: [{name: a, podCIDRs: [10.0.1.0/24, 'fd00:1::/64']}]\nendpoints: [{name: e, ip: [10.0.1.5, 10.0.1.6]}]\n", "endpoints[0].ip[1]: two IPv4 addresses"},
		{"v6 gateway ip", "name: x\nhosts: [{name: a, podCIDRs: [10.0.1.0/24, 'fd00:1::/64']}]\nendpoints: [{name: e, ip: [10.0.1.5, 'fd00:1::1']}]\n", "endpoints[0].ip[1]: fd00:1::1 is not a usable address"},
		{"overlapping cidrs", "name: x\nhosts:\n  - {name: a, podCIDR: 10.0.0.0/16}\n  - {name: b, podCIDR: 10.0.5.0/24}\n", "bad.yaml: hosts[1].podCIDR: 10.0.5.0/24 overlaps hosts[0].podCIDR 10.0.0.0/16"},
		{"overlaps transit", "name: x\nhosts: [{name: a, podCIDR: 100.64.1.0/24}]\n", "overlaps transitCIDR 100.64.0.0/16"},
		{"services cidr overlaps pods", "name: x\nhosts: [{name: a, podCIDR: 10.96.1.0/24}]\n", "bad.yaml: services.cidr: 10.96.0.0/16 overlaps hosts[0].podCIDR 10.96.1.0/24"},
		{"services cidr bad", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\nservices: {cidr: 10.96.0.0/40}\n", `bad.yaml: services.cidr: "10.96.0.0/40" is not a CIDR`},
		{"services cidr small", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\nservices: {cidr: 10.96.0.0/30}\n", "bad.yaml: services.cidr: 10.96.0.0/30 is too small"},
		{"services cidrs v6 on a v4 lab", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\nservices: {cidrs: [10.96.0.0/16, 'fd00:96::/108']}\n", "bad.yaml: services.cidrs[1]: fd00:96::/108 is an IPv6 range, but the lab's pods have IPv4 only"},
		{"services cidrs missing v6", "name: x\nhosts: [{name: a, podCIDRs: [10.0.0.0/24, 'fd00:0:1::/64']}]\nservices: {cidrs: [10.96.0.0/16]}\n", "bad.yaml: services.cidrs: gives no IPv6 range, but the lab's pods have IPv4 and IPv6"},
		{"services cidrs two v4", "name: x\nhosts: [{name: a, podCIDRs: [10.0.0.0/24, 'fd00:0:1::/64']}]\nservices: {cidrs: [10.96.0.0/16, 10.97.0.0/16]}\n", "bad.yaml: services.cidrs[1]: 10.97.0.0/16 is a second IPv4 range"},
		{"services cidr and cidrs", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\nservices: {cidr: 10.96.0.0/16, cidrs: [10.96.0.0/16]}\n", "bad.yaml: services.cidrs: give cidr or cidrs, not both"},
		{"services cidrs v6 overlaps transit", "name: x\nhosts: [{name: a, podCIDRs: [10.0.0.0/24, 'fd00:0:1::/64']}]\nservices: {cidrs: [10.96.0.0/16, 'fd00:ffff::/108']}\n", "bad.yaml: services.cidrs[1]: fd00:ffff::/108 overlaps the IPv6 transit range fd00:ffff::/96"},
		{"services cidrs v6 small", "name: x\nhosts: [{name: a, podCIDRs: [10.0.0.0/24, 'fd00:0:1::/64']}]\nservices: {cidrs: [10.96.0.0/16, 'fd00:96::/126']}\n", "bad.yaml: services.cidrs[1]: fd00:96::/126 is too small: give at least a /124"},
		{"services proxy ipvs", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\nservices: {proxy: ipvs}\n", `bad.yaml: services.proxy: service proxy "ipvs" is not available: this kernel has no IPVS`},
		{"services proxy unknown", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\nservices: {proxy: kube}\n", `bad.yaml: services.proxy: unknown service proxy "kube" (supported: iptables, nftables, ebpf, none)`},
		{"services proxy on ebpf", "name: x\ndatapath: ebpf\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\nservices: {proxy: nftables}\n", "bad.yaml: services.proxy: the nftables service proxy translates in netfilter's PREROUTING"},
		{"services unknown field", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\nservices: {proxi: nftables}\n", `bad.yaml: services.proxi: unknown field "proxi" (known fields: cidr, cidrs, proxy)`},
		{"duplicate host", "name: x\nhosts:\n  - {name: a, podCIDR: 10.0.0.0/24}\n  - {name: a, podCIDR: 10.0.1.0/24}\n", `bad.yaml: hosts[1].name: duplicate host name "a" (also hosts[0])`},
		{"link unknown host", "name: x\n" + hosts2 + "links: [{between: [flip, flop]}]\n", `bad.yaml: links[0].between[1]: unknown host "flop" (hosts: flip, flap)`},
		{"link one host", "name: x\n" + hosts2 + "links: [{between: [flip]}]\n", "bad.yaml: links[0].between: must name exactly two hosts"},
		{"link self", "name: x\n" + hosts2 + "links: [{between: [flip, flip]}]\n", "two different hosts"},
		{"link twice", "name: x\n" + hosts2 + "links: [{between: [flip, flap]}, {between: [flap, flip]}]\n", "bad.yaml: links[1].between: hosts flap and flip are already linked by links[0]"},
		{"link kind", "name: x\n" + hosts2 + "links: [{between: [flip, flap], kind: gre}]\n", `bad.yaml: links[0].kind: unknown link kind "gre" (supported: wire, vxlan)`},
		{"endpoint unknown host", "name: x\n" + linked + "endpoints: [{name: a, host: flop}]\n", `bad.yaml: endpoints[0].host: unknown host "flop" (hosts: flip, flap)`},
		{"endpoint needs host", "name: x\n" + linked + "endpoints: [{name: a}]\n", "bad.yaml: endpoints[0].host: is required when the lab has several hosts (flip, flap)"},
		{"endpoint unknown namespace", "name: x\n" + linked + "endpoints: [{name: a, host: flip, namespace: prod}]\n", `bad.yaml: endpoints[0].namespace: unknown namespace "prod" (declare it under namespaces:)`},
		{"duplicate endpoint", "name: x\n" + linked + "endpoints: [{name: a, host: flip}, {name: a, host: flap}]\n", "bad.yaml: endpoints[1].name: duplicate endpoint default/a (also endpoints[0])"},
		{"bad endpoint name", "name: x\n" + linked + "endpoints: [{name: A.b, host: flip}]\n", `bad.yaml: endpoints[0].name: "A.b" must consist`},
		{"ip outside cidr", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ip: 10.0.191.5}]\n", "bad.yaml: endpoints[0].ip: 10.0.191.5 is not a usable address of host flip's podCIDR 10.0.192.0/24"},
		{"ip is gateway", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ip: 10.0.192.1}]\n", "the first address is the bridge"},
		{"ip not an ip", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ip: 10.0.192}]\n", `bad.yaml: endpoints[0].ip: "10.0.192" is not an IPv4 or IPv6 address`},
		{"ip taken twice", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ip: 10.0.192.9}, {name: b, host: flip, ip: 10.0.192.9}]\n", "bad.yaml: endpoints[1].ip: 10.0.192.9 is already taken by default/a"},
		{"too many endpoints", many, "bad.yaml: endpoints[5]: host h's podCIDR 10.0.0.0/29 has no free address left (5 usable, 6 endpoints on it)"},
		{"label key", "name: x\n" + linked + "endpoints: [{name: a, host: flip, labels: {'bad key': v}}]\n", `bad.yaml: endpoints[0].labels: label key "bad key"`},
		{"label value", "name: x\n" + linked + "endpoints: [{name: a, host: flip, labels: {app: '-x-'}}]\n", `bad.yaml: endpoints[0].labels: key "app": label value "-x-"`},
		{"namespace label", "name: x\n" + linked + "namespaces: {x: {labels: {'a/b/c': v}}}\n", `bad.yaml: namespaces.x.labels: label key "a/b/c"`},
		{"metadata name", "name: x\n" + linked + "namespaces: {x: {labels: {kubernetes.io/metadata.name: y}}}\n", "is always the namespace's own name"},
		{"port range", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ports: [{port: 70000}]}]\n", "bad.yaml: endpoints[0].ports[0].port: 70000 is not a port number (1-65535)"},
		{"port protocol", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ports: [{port: 80, protocol: ICMP}]}]\n", `bad.yaml: endpoints[0].ports[0].protocol: unknown protocol "ICMP"`},
		{"port name", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ports: [{name: Web_Port, port: 80}]}]\n", "bad.yaml: endpoints[0].ports[0].name: port name \"Web_Port\""},
		{"port twice", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ports: [{port: 80}, {port: 80, protocol: TCP}]}]\n", "bad.yaml: endpoints[0].ports[1].port: 80/TCP is declared twice"},
		{"port protocol case", "name: x\n" + linked + "endpoints: [{name: a, host: flip, ports: [{port: 80, protocol: tcp}]}]\n", `bad.yaml: endpoints[0].ports[0].protocol: unknown protocol "tcp" (TCP, UDP or SCTP)`},
		{"unconnected hosts", "name: x\n" + hosts2, "bad.yaml: links: no link path joins hosts flip and flap"},
		{"reserved namespace", "name: x\n" + linked + "namespaces: {host: {}}\n", `bad.yaml: namespaces.host: namespace name "host" is reserved`},
		{"multicast cidr", "name: x\nhosts: [{name: a, podCIDR: 224.0.0.0/24}]\n", "bad.yaml: hosts[0].podCIDR: 224.0.0.0/24 overlaps the multicast (224.0.0.0/4) range"},
		{"loopback cidr", "name: x\nhosts: [{name: a, podCIDR: 127.0.0.0/24}]\n", "overlaps the loopback (127.0.0.0/8) range"},
		{"mtu zero", "name: x\nmtu: 0\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\n", "bad.yaml: mtu: 0 is out of range"},
		{"float length", "name: x\nchain: {length: 2.5}\n", `bad.yaml: chain.length: expected an integer, got "2.5"`},
		{"huge length", "name: x\nchain: {length: 9223372036854775807}\n", "bad.yaml: chain.length: 9223372036854775807 is above the limit of 1000"},
		{"wrong shape list", "name: x\nendpoints: {p: {}}\n", "bad.yaml: endpoints: expected a list, got a mapping"},
		{"wrong shape map", "name: x\nnamespaces: [x]\n", "bad.yaml: namespaces: expected a mapping, got a list"},
		{"nested wrong shape", "name: x\n" + linked + "endpoints: [{name: a, labels: {a: {b: c}}}]\n", "bad.yaml: endpoints[0].labels.a: expected a string, got a mapping"},
		{"iptables options on nftables", "name: x\ndatapath: nftables\niptables: {filler: 10}\n", "bad.yaml: iptables: options for the iptables datapath, but the lab's datapath is nftables"},
		{"filler range", "name: x\niptables: {filler: -1}\n", "bad.yaml: iptables.filler: -1 is out of range"},
		{"filler mode", "name: x\niptables: {fillerMode: bottom}\n", `bad.yaml: iptables.fillerMode: unknown mode "bottom" (no-match, top-of-chain)`},
		{"iptables peers", "name: x\niptables: {peers: sets}\n", `bad.yaml: iptables.peers: unknown mode "sets" (addresses, ipsets)`},
		{"iptables peers on ebpf", "name: x\ndatapath: ebpf\niptables: {peers: ipsets}\n", "bad.yaml: iptables: options for the iptables datapath, but the lab's datapath is ebpf"},
		{"ebpf options off ebpf", "name: x\nebpf: {hostRouting: legacy}\n", `bad.yaml: ebpf: options for the ebpf datapath, but the lab's datapath is iptables (add datapath: ebpf, or use --datapath ebpf)`},
		{"host routing", "name: x\ndatapath: ebpf\nebpf: {hostRouting: fast}\n", `bad.yaml: ebpf.hostRouting: unknown mode "fast" (bpf, legacy)`},
		{"policy map size", "name: x\ndatapath: ebpf\nebpf: {policyMapSize: 0}\n", `bad.yaml: ebpf.policyMapSize: 0 is out of range (1 to 4194304)`},
		{"ct map size", "name: x\ndatapath: ebpf\nebpf: {ctMapSize: 10}\n", `bad.yaml: ebpf.ctMapSize: 10 is out of range (1024 to 16777216)`},
		{"max endpoints", "name: x\ndatapath: ebpf\nebpf: {maxEndpoints: 100000}\n", `bad.yaml: ebpf.maxEndpoints: 100000 is out of range (1 to 16384)`},
		{"too many endpoints", "name: x\ndatapath: ebpf\nebpf: {maxEndpoints: 1}\nhosts: [{name: h, podCIDR: 10.0.0.0/24}]\nendpoints: [{name: a}, {name: b}]\n", `bad.yaml: ebpf.maxEndpoints: host h has 2 endpoints, more than 1 (raise ebpf.maxEndpoints, at most 16384)`},
		{"ebpf unknown", "name: x\ndatapath: ebpf\nebpf: {mapSize: 1}\n", `bad.yaml: ebpf.mapSize: unknown field "mapSize"`},
		{"duplicate key", "name: x\nname: y\n", `bad.yaml: name: mapping key "name" already defined at line 1`},
		{"chain length", "name: x\nchain: {length: -1}\n", "bad.yaml: chain.length: -1 is below 0"},
		{"shaper on a direct pair", "name: x\nchain: {length: 0, functions: [{kind: shaper, rate: 1gbit}]}\n", "bad.yaml: chain.functions[0]: a direct pair (chain.length 0) has no hop to shape in"},
		{"switches without ovs", "name: x\nchain: {length: 2, switches: 3}\n", "bad.yaml: chain.switches: applies to link: ovs"},
		{"too many switches", "name: x\nchain: {length: 0, link: ovs, switches: 65}\n", "bad.yaml: chain.switches: 65 is out of range (1 to 64)"},
		{"switch link", "name: x\nchain: {length: 0, link: ovs, switches: 2, switchLink: cable}\n", `bad.yaml: chain.switchLink: unknown link between switches "cable" (patch, veth)`},
		{"chain link", "name: x\nchain: {length: 2, link: token-ring}\n", `bad.yaml: chain.link: unknown chain link "token-ring" (supported: veth, bridge, ovs)`},
		{"chain with hosts", "name: x\n" + hosts2 + "chain: {length: 2}\n", "bad.yaml: hosts: a chain lab builds its own namespaces"},
		{"chain too long", "name: x\nchain: {length: 300}\n", "bad.yaml: chain.length: 300 hops need 301 /24 segments but chain.cidr 10.100.0.0/16 holds 256"},
		{"function kind", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: nat}\n", "bad.yaml: chain.functions[0].kind: unknown function kind \"nat\" (supported: firewall, shaper)"},
		{"function without kind", "name: x\nchain:\n  length: 2\n  functions:\n    - {rules: 5}\n", "bad.yaml: chain.functions[0].kind: is required (firewall, shaper)"},
		{"function kind type", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: [firewall]}\n", "bad.yaml: chain.functions[0].kind: expected a function kind (firewall, shaper), got a list"},
		{"function not a mapping", "name: x\nchain:\n  length: 2\n  functions:\n    - firewall\n", "bad.yaml: chain.functions[0]: expected a mapping such as {kind: firewall, rules: 100}, got \"firewall\""},
		{"firewall unknown field", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: firewall, rule: 5}\n", "bad.yaml: chain.functions[0].rule: unknown field \"rule\" (known fields: backend, kind, rules, spread, stateful)"},
		{"firewall with shaper field", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: firewall, rate: 1gbit}\n", "bad.yaml: chain.functions[0].rate: unknown field \"rate\" (known fields: backend, kind, rules, spread, stateful)"},
		{"firewall rules range", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: firewall, rules: 100001}\n", "bad.yaml: chain.functions[0].rules: 100001 is out of range (0 to 100000)"},
		{"firewall negative rules", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: firewall, rules: -1}\n", "bad.yaml: chain.functions[0].rules: -1 is out of range (0 to 100000)"},
		{"firewall rules type", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: firewall, rules: many}\n", "bad.yaml: chain.functions[0].rules: expected an integer, got \"many\""},
		{"firewall stateful type", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: firewall, stateful: maybe}\n", "bad.yaml: chain.functions[0].stateful: expected true or false, got \"maybe\""},
		{"firewall backend", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: firewall, backend: bpf}\n", "bad.yaml: chain.functions[0].backend: unknown iptables backend \"bpf\" (legacy, nft)"},
		{"shaper unknown field", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 1gbit, latency: 5ms}\n", "bad.yaml: chain.functions[0].latency: unknown field \"latency\" (known fields: burst, ceil, direction, kind, rate)"},
		{"shaper without rate", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper}\n", "bad.yaml: chain.functions[0].rate: is required (e.g. rate: 1gbit"},
		{"shaper rate syntax", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: fast}\n", "bad.yaml: chain.functions[0].rate: \"fast\" is not a rate (e.g. 100mbit, 1gbit, 1tbit)"},
		{"shaper rate unit", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 10mbits}\n", "bad.yaml: chain.functions[0].rate: \"10mbits\": unknown unit \"mbits\""},
		{"shaper rate without unit", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: \"100\"}\n", "bad.yaml: chain.functions[0].rate: \"100\" has no unit (e.g. 100mbit or 100gbit)"},
		{"shaper rate number", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 100}\n", "bad.yaml: chain.functions[0].rate: expected a string, got int 100"},
		{"shaper rate low", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 10kbit}\n", "bad.yaml: chain.functions[0].rate: 10kbit is out of range (1mbit to 10tbit)"},
		{"shaper rate high", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 20tbit}\n", "bad.yaml: chain.functions[0].rate: 20tbit is out of range (1mbit to 10tbit)"},
		{"shaper ceil below rate", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 1gbit, ceil: 100mbit}\n", "bad.yaml: chain.functions[0].ceil: 100mbit is out of range (the rate, 1gbit, to 10tbit)"},
		{"shaper burst syntax", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 1gbit, burst: lots}\n", "bad.yaml: chain.functions[0].burst: \"lots\" is not a size (e.g. 64k, 1mb, 1500)"},
		{"shaper burst small", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 1gbit, burst: 100b}\n", "bad.yaml: chain.functions[0].burst: 100b is out of range (1600 bytes to 4gb)"},
		{"shaper burst long", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 1mbit, burst: 10mb}\n", "bad.yaml: chain.functions[0].burst: 10485760 bytes take 84 s to send at 1mbit: at most 10 s of traffic"},
		{"shaper direction", "name: x\nchain:\n  length: 2\n  functions:\n    - {kind: shaper, rate: 1gbit, direction: up}\n", "bad.yaml: chain.functions[0].direction: unknown direction \"up\""},
		{"two firewalls", "name: x\nchain: {length: 2, functions: [{kind: firewall}, {kind: shaper, rate: 1gbit}, {kind: firewall, rules: 3}]}\n", "bad.yaml: chain.functions[2].kind: a second firewall (the first is chain.functions[0]): a hop holds at most one function of each kind"},
		{"functions not a list", "name: x\nchain: {length: 2, functions: {kind: firewall}}\n", "bad.yaml: chain.functions: expected a list, got a mapping"},
		{"iptables options on a chain", "name: x\niptables: {filler: 3}\nchain: {length: 2}\n", "bad.yaml: iptables: options of the iptables datapath, but a chain lab has no policy datapath"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "bad.yaml", Overrides{})
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if !input.Is(err) {
				t.Errorf("error %T is not an input.Error", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n  %s\nwant it to contain:\n  %s", err, tc.want)
			}
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("error spans several lines: %q", err)
			}
		})
	}
}

func TestOverrides(t *testing.T) {
	s, err := Parse([]byte(good), "good.yaml", Overrides{Name: "other", Datapath: "nftables"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "other" || s.Datapath != "nftables" || !strings.HasPrefix(s.Endpoints[0].Netns, "cnlab.other.") {
		t.Errorf("overrides not applied: %s %s %s", s.Name, s.Datapath, s.Endpoints[0].Netns)
	}
	if _, err := Parse([]byte(good), "good.yaml", Overrides{Datapath: "ovs"}); err == nil || !strings.Contains(err.Error(), "--datapath") {
		t.Errorf("bad --datapath: %v", err)
	}
	for _, tc := range []struct {
		datapath, proxy string
		want            kind.Proxy
	}{{"iptables", "", kind.ProxyIPTables}, {"nftables", "", kind.ProxyNFTables}, {"ebpf", "", kind.ProxyEBPF},
		{"iptables", "nftables", kind.ProxyNFTables}, {"nftables", "iptables", kind.ProxyIPTables}, {"ebpf", "none", kind.ProxyNone}} {
		s, err := Parse([]byte(good), "good.yaml", Overrides{Datapath: tc.datapath, Proxy: tc.proxy})
		if err != nil {
			t.Fatalf("%s with proxy %q: %v", tc.datapath, tc.proxy, err)
		}
		if s.Services.Proxy != tc.want || s.Services.CIDR.String() != DefaultServiceCIDR {
			t.Errorf("%s with proxy %q: services %+v, want proxy %s from %s", tc.datapath, tc.proxy, s.Services, tc.want, DefaultServiceCIDR)
		}
	}
	if _, err := Parse([]byte(good), "good.yaml", Overrides{Proxy: "ipvs"}); err == nil || !strings.HasPrefix(err.Error(), "--service-proxy: ") {
		t.Errorf("--service-proxy ipvs: %v", err)
	}
	if _, err := Parse([]byte(good), "good.yaml", Overrides{Datapath: "ebpf", Proxy: "iptables"}); err == nil || !strings.Contains(err.Error(), "services.proxy") {
		t.Errorf("--service-proxy iptables on ebpf: %v", err)
	}
	if _, err := Preset("nope", PresetOptions{}, Overrides{}); err == nil || !strings.Contains(err.Error(), "presets: chain, direct, multi-host, single-host") {
		t.Errorf("unknown preset: %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("/nonexistent/topo.yaml", Overrides{})
	if err == nil || err.Error() != "/nonexistent/topo.yaml: cannot read: no such file or directory" {
		t.Errorf("got %v", err)
	}
}

func TestNameHelpers(t *testing.T) {
	if LabOfNetns(HostNetns("lab-1", "flip")) != "lab-1" || LabOfNetns("other") != "" || LabOfNetns("cnlab.") != "" {
		t.Error("LabOfNetns")
	}
	p := netip.MustParsePrefix("10.0.0.0/24")
	if !usable(p, netip.MustParseAddr("10.0.0.2")) || usable(p, netip.MustParseAddr("10.0.0.255")) || usable(p, netip.MustParseAddr("10.0.0.1")) {
		t.Error("usable")
	}
	if sub, ok := nthSubnet(netip.MustParsePrefix("100.64.0.0/16"), 30, 3); !ok || sub.String() != "100.64.0.12/30" {
		t.Errorf("nthSubnet: %s %v", sub, ok)
	}
}

// TestLeafBridges checks that a host with more endpoints than one bridge
// takes puts them, in file order, on leaf bridges, and that a lab within
// one bridge's ports resolves as before (no leaves, no Bridge field).
func TestLeafBridges(t *testing.T) {
	file := func(n int) []byte {
		var b strings.Builder
		b.WriteString("name: leaves\nhosts: [{name: h, podCIDR: 10.64.0.0/18}, {name: g, podCIDR: 10.65.0.0/24}]\nlinks: [{between: [h, g]}]\nendpoints:\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "  - {name: e%d, host: h}\n", i)
			if i == 0 {
				b.WriteString("  - {name: other, host: g}\n")
			}
		}
		return []byte(b.String())
	}
	small, err := Parse(file(EndpointsPerBridge), "small.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range small.Hosts {
		if len(h.Leaves) != 0 {
			t.Errorf("host %s: leaves %v with %d endpoints", h.Name, h.Leaves, EndpointsPerBridge)
		}
	}
	for _, ep := range small.Endpoints {
		if ep.Bridge != "" {
			t.Fatalf("%s: bridge %q, want none", ep.ID(), ep.Bridge)
		}
	}
	n := 2*EndpointsPerBridge + 500
	big, err := Parse(file(n), "big.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if got := big.Host("h").Leaves; !slices.Equal(got, []string{"br1", "br2"}) {
		t.Errorf("host h leaves = %v, want [br1 br2]", got)
	}
	if got := big.Host("g").Leaves; len(got) != 0 {
		t.Errorf("host g leaves = %v, want none", got)
	}
	want := map[string]string{"e0": "", "other": "", "e999": "", "e1000": "br1", "e1999": "br1", "e2000": "br2", fmt.Sprintf("e%d", n-1): "br2"}
	for _, ep := range big.Endpoints {
		if w, ok := want[ep.Name]; ok && ep.Bridge != w {
			t.Errorf("%s: bridge %q, want %q", ep.ID(), ep.Bridge, w)
		}
	}
}

// A file with several mistakes gets them all in one run, one line each
// naming the file and the field, as a compiler reports: a host declared
// wrongly is reported once, not again by what names it (issue 37).
func TestResolveReportsEveryError(t *testing.T) {
	const bad = `
name: three
hosts:
  - {name: flip, podCIDR: 10.0.192.0/33}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wirre}
namespaces:
  host: {}
endpoints:
  - {name: a, host: flip}
  - {name: b, host: flop}
  - {name: c, host: flap, ip: 10.0.5.5}
  - {name: d, namespace: host, host: flap}
`
	_, err := Parse([]byte(bad), "three.yaml", Overrides{})
	var l input.Errors
	if !errors.As(err, &l) {
		t.Fatalf("got %v (%T), want input.Errors", err, err)
	}
	var got []string
	for _, e := range l {
		if e.File != "three.yaml" {
			t.Errorf("%v: file %q", e, e.File)
		}
		got = append(got, e.Path)
	}
	want := []string{"hosts[0].podCIDR", "namespaces.host", "links[0].kind", "endpoints[1].host", "endpoints[2].ip"}
	if !slices.Equal(got, want) {
		t.Errorf("paths %v, want %v\n%v", got, want, err)
	}
	// The first line is what a single error printed before.
	if first, _, _ := strings.Cut(err.Error(), "\n"); first != l[0].Error() || !strings.HasPrefix(first, "three.yaml: hosts[0].podCIDR: ") {
		t.Errorf("first line %q", first)
	}
	if !input.Is(err) {
		t.Error("not bad input (exit 2)")
	}
	// Unknown fields: every one.
	_, err = Parse([]byte("name: x\nhosts: [{name: a, podcidr: 1, lables: {}}]\nendpoints: [{nme: a}]\n"), "keys.yaml", Overrides{})
	if !errors.As(err, &l) || len(l) != 3 {
		t.Errorf("unknown fields: got %v, want three", err)
	}
	// One mistake is a single *input.Error, as before.
	_, err = Parse([]byte("name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/33}]\n"), "one.yaml", Overrides{})
	var ie *input.Error
	if errors.As(err, &l) || !errors.As(err, &ie) {
		t.Errorf("one mistake: got %v (%T)", err, err)
	}
}

func TestServicesCIDRsPerFamily(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"v4 default", "name: x\nhosts: [{name: a, podCIDR: 10.0.0.0/24}]\n", "[10.96.0.0/16]"},
		{"dual default", "name: x\nhosts: [{name: a, podCIDRs: [10.0.0.0/24, 'fd00:0:1::/64']}]\n", "[10.96.0.0/16 fd00:96::/108]"},
		{"v6 first", "name: x\nhosts: [{name: a, podCIDRs: ['fd00:0:1::/64', 10.0.0.0/24]}]\n", "[fd00:96::/108 10.96.0.0/16]"},
		{"v6 only", "name: x\nhosts: [{name: a, podCIDRs: ['fd00:0:1::/64']}]\n", "[fd00:96::/108]"},
		{"given in any order", "name: x\nhosts: [{name: a, podCIDRs: [10.0.0.0/24, 'fd00:0:1::/64']}]\nservices: {cidrs: ['fd00:97::/112', 10.97.0.0/16]}\n", "[10.97.0.0/16 fd00:97::/112]"},
		{"v6 cidr on a v6 lab", "name: x\nhosts: [{name: a, podCIDRs: ['fd00:0:1::/64']}]\nservices: {cidr: 'fd00:97::/112'}\n", "[fd00:97::/112]"},
	} {
		sp, err := Parse([]byte(c.yaml), "x.yaml", Overrides{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := fmt.Sprint(sp.Services.CIDRs); got != c.want {
			t.Errorf("%s: CIDRs %s, want %s", c.name, got, c.want)
		}
		if sp.Services.CIDR != sp.Services.CIDRs[0] {
			t.Errorf("%s: CIDR %s is not the first of CIDRs", c.name, sp.Services.CIDR)
		}
	}
}

func TestDualStackResolve(t *testing.T) {
	s, err := Parse([]byte(`name: ds
hosts:
  - {name: h, podCIDRs: [10.1.0.0/24, 'fd00:1::/64']}
  - {name: g, podCIDRs: [10.2.0.0/24, 'fd00:2::/64']}
links: [{between: [h, g], kind: vxlan}]
endpoints:
  - {name: a, host: h, ip: ['fd00:1::10']}
  - {name: b, host: h}
  - {name: c, host: g, ip: [10.2.0.9, 'fd00:2::9']}
`), "ds.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Families(); len(got) != 2 || got[0] != 4 || got[1] != 6 {
		t.Fatalf("families %v", got)
	}
	want := map[string]string{"default/a": "10.1.0.2 fd00:1::10", "default/b": "10.1.0.3 fd00:1::2", "default/c": "10.2.0.9 fd00:2::9"}
	for _, ep := range s.Endpoints {
		got := fmt.Sprint(ep.Addrs()[0], " ", ep.Addrs()[1])
		if got != want[ep.ID()] || ep.IP != ep.IPs[0] {
			t.Errorf("%s: %s (ip %s), want %s", ep.ID(), got, ep.IP, want[ep.ID()])
		}
		if a, ok := ep.Addr(6); !ok || !a.Is6() {
			t.Errorf("%s: Addr(6) = %v %v", ep.ID(), a, ok)
		}
	}
	h := s.Host("h")
	if fmt.Sprint(h.Gateways) != "[10.1.0.1 fd00:1::1]" {
		t.Errorf("gateways %v", h.Gateways)
	}
	if fmt.Sprint(h.Routes) != "[{10.2.0.0/24 100.64.0.6 vxlan0} {fd00:2::/64 fd00:ffff::6440:6 vxlan0}]" {
		t.Errorf("routes %v", h.Routes)
	}
	if l := s.Links[0]; l.Wire6.String() != "fd00:ffff::6440:0/126" || l.MTU != 1550 {
		t.Errorf("link: wire6 %s, mtu %d", l.Wire6, l.MTU)
	}
	v6, err := Parse([]byte("name: v6\nhosts: [{name: h, podCIDR: 'fd00:1::/120'}, {name: g, podCIDR: 'fd00:2::/120'}]\nlinks: [{between: [h, g], kind: vxlan}]\nendpoints: [{name: a, host: g}]\n"), "v6.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if v6.Endpoints[0].IP.String() != "fd00:2::2" || !v6.HasFamily(6) || v6.HasFamily(4) || v6.Links[0].MTU != 1570 {
		t.Errorf("IPv6-only: ip %s, families %v, link MTU %d", v6.Endpoints[0].IP, v6.Families(), v6.Links[0].MTU)
	}
	full := "name: full\nhosts: [{name: h, podCIDRs: [10.1.0.0/30, 'fd00:1::/120']}]\nendpoints: [{name: a}, {name: b}]\n"
	if _, err := Parse([]byte(full), "full.yaml", Overrides{}); err == nil || !strings.Contains(err.Error(), "10.1.0.0/30 has no free address left") {
		t.Errorf("full v4 prefix: %v", err)
	}
}
