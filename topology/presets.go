package topology

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/cnlab/cnlab/internal/input"
)

// PresetOptions tunes a preset. Zero values take the preset's defaults.
type PresetOptions struct {
	Length int    // chain: number of forwarding namespaces (default 3)
	Link   string // chain: veth or bridge; multi-host: wire or vxlan
	// Functions go in every hop of the chain preset (validated as the
	// file's chain.functions are; Shaper.Rate from ParseRate).
	Functions []Function
	// DualStack gives the hosts of single-host and multi-host an IPv6
	// prefix too: fd00:0:N::/64 beside 10.0.N.0/24 (chains stay IPv4).
	DualStack bool
}

// PresetDirect names the preset of two endpoints on one veth pair.
const PresetDirect = "direct"

// presets build the seed studies' testbeds without a file. single-host and
// multi-host follow seed 000 (hosts Flip and Flap, their container subnets,
// server on Flip, client on Flap); chain follows seed 001.
var presets = map[string]func(o PresetOptions) *rawFile{
	"single-host": func(o PresetOptions) *rawFile {
		return &rawFile{
			Name:  "single-host",
			Hosts: []rawHost{{Name: "flip", PodCIDR: "10.0.192.0/24"}},
			Endpoints: []rawEndpoint{
				{Name: "client", Labels: map[string]string{"app": "client"}},
				{Name: "server", Labels: map[string]string{"app": "server"}, Ports: serverPorts()},
			},
		}
	},
	"multi-host": func(o PresetOptions) *rawFile {
		return &rawFile{
			Name: "multi-host",
			Hosts: []rawHost{
				{Name: "flip", PodCIDR: "10.0.192.0/24"},
				{Name: "flap", PodCIDR: "10.0.191.0/24"},
			},
			Links: []rawLink{{Between: []string{"flip", "flap"}, Kind: o.Link}},
			Endpoints: []rawEndpoint{
				{Name: "client", Host: "flap", Labels: map[string]string{"app": "client"}},
				{Name: "server", Host: "flip", Labels: map[string]string{"app": "server"}, Ports: serverPorts()},
			},
		}
	},
	// direct is seed 001's shortest chain (n = 2) and seed 000's bare-veth
	// baseline (§8.1.1): client and server on one veth pair, no datapath.
	PresetDirect: func(o PresetOptions) *rawFile {
		return &rawFile{Name: PresetDirect, Chain: &rawChain{Length: 0, Link: o.Link, functions: o.Functions}}
	},
	"chain": func(o PresetOptions) *rawFile {
		n := o.Length
		if n == 0 {
			n = 3
		}
		return &rawFile{Name: "chain", Chain: &rawChain{Length: n, Link: o.Link, functions: o.Functions}}
	},
}

func serverPorts() []rawPort {
	var out []rawPort
	for _, p := range defaultServerPorts() {
		out = append(out, rawPort{Name: p.Name, Port: p.Port, Protocol: p.Protocol})
	}
	return out
}

// defaultServerPorts are the ports the presets' server declares.
func defaultServerPorts() []Port {
	return []Port{{Name: "iperf3", Port: 5201, Protocol: "TCP"}, {Name: "http", Port: 80, Protocol: "TCP"}}
}

// Presets lists the preset names.
func Presets() []string {
	var out []string
	for k := range presets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Preset resolves a named preset. name overrides the lab name when set.
func Preset(preset string, o PresetOptions, ov Overrides) (*Spec, error) {
	file := "preset " + preset
	mk, ok := presets[preset]
	if !ok {
		return nil, &input.Error{File: "--preset", Msg: fmt.Sprintf("unknown preset %q (presets: %s)", preset, strings.Join(Presets(), ", "))}
	}
	raw := mk(o)
	if o.DualStack {
		if raw.Chain != nil {
			return nil, &input.Error{File: file, Path: "ipFamily", Msg: "the chain presets are IPv4 only"}
		}
		for i := range raw.Hosts {
			h := &raw.Hosts[i]
			p := netip.MustParsePrefix(h.PodCIDR)
			h.PodCIDRs = []string{h.PodCIDR, fmt.Sprintf("fd00:0:%d::/64", p.Addr().As4()[2])}
			h.PodCIDR = ""
		}
	}
	if o.Length != 0 && (raw.Chain == nil || preset == PresetDirect) {
		return nil, &input.Error{File: file, Path: "--length", Msg: "applies to the chain preset only (direct is a chain of length 0)"}
	}
	if len(o.Functions) > 0 && raw.Chain == nil {
		return nil, &input.Error{File: file, Path: "functions", Msg: "network functions go in the hops of the chain preset only"}
	}
	return resolve(raw, file, ov)
}
