package topology

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/internal/yamlx"
	"gopkg.in/yaml.v3"
)

// Network function kinds of chain hops (seed 001, figures 9-11).
const (
	FunctionFirewall = "firewall"
	FunctionShaper   = "shaper"
)

// FunctionKinds lists the network function kinds a chain hop may hold.
var FunctionKinds = []string{FunctionFirewall, FunctionShaper}

// iptables backends of a firewall function (as for the iptables datapath).
const (
	BackendLegacy = kind.BackendLegacy
	BackendNFT    = kind.BackendNFT
)

// Shaper directions: the hop's egress towards the server, towards the
// client, or both.
const (
	ShapeToServer = "server"
	ShapeToClient = "client"
	ShapeBoth     = "both"
	// ShapeAll is seed 001's placement: every interface of every
	// namespace of the chain, the ends included.
	ShapeAll = "all"
)

// Limits of the network functions.
const (
	MaxFirewallRules = kind.MaxFiller // filler rules of one firewall (per hop, or in all with spread)
	MinShaperRate    = 1_000_000      // 1mbit: a 64 KiB burst drains in half a second
	MaxShaperRate    = 10 * 1e12      // 10tbit, ten times the seed's "no limit" of 1tbit
	MinShaperBurst   = 1600           // a full-size frame and its overhead
	MaxShaperBurst   = 1<<32 - 1      // HTB keeps the burst in 32 bits
	maxBurstSeconds  = 10             // HTB keeps the burst as a time in 32-bit ticks
	defaultBurstMin  = 64 << 10       // a GSO packet of 64 KiB passes in one go
	defaultBurstTime = 1000           // otherwise one millisecond at the rate (1/1000 s)
	maxHTBQuantum    = 200000         // the kernel's own bound for a computed quantum
	minHTBQuantum    = 1000           // and its lower one
	htbQdiscHandle   = 0x10000        // 1:
	htbClassHandle   = 0x10001        // 1:1, the qdisc's default class
)

// Function is one network function placed in the hops of a chain. Exactly
// one of Firewall and Shaper is set, as Kind says.
type Function struct {
	Kind     string    `json:"kind"`
	Firewall *Firewall `json:"firewall,omitempty"`
	Shaper   *Shaper   `json:"shaper,omitempty"`
}

// Firewall is an iptables firewall in the namespaces of a chain, laid out
// as seed 001's own scripts did it: in every namespace, a chain CNLAB-FW
// jumped to from INPUT (and from FORWARD in the hops) holds Rules rules
// that match nothing the chain carries, so every packet a namespace
// forwards or receives walks them all (the seed's worst case). Stateless
// rules match an unused source address; stateful rules each ask conntrack
// for the connection's byte count (-m connbytes, as the seed) with a range
// no connection reaches. Spread splits Rules over the namespaces the
// client's packets cross (the hops and the server: the seed's "n-1
// namespaces") instead of putting Rules in each.
type Firewall struct {
	Rules    int    `json:"rules"`
	Stateful bool   `json:"stateful"`
	Spread   bool   `json:"spread"`
	Backend  string `json:"backend"`  // legacy (x_tables, default) or nft
	HopRules []int  `json:"hopRules"` // resolved: the rules in hop 1..N
	// ServerRules and ClientRules are the rules in the ends' INPUT chains
	// (resolved; the client's get no share of a spread).
	ServerRules int `json:"serverRules"`
	ClientRules int `json:"clientRules"`
}

// Shaper is an HTB qdisc on a hop's egress device(s) with one class, the
// default, at Rate (bits/s), borrowing up to Ceil, with a bucket of Burst
// bytes: `tc qdisc add dev DEV root handle 1: htb default 1` and `tc class
// add dev DEV parent 1: classid 1:1 htb rate RATE ceil CEIL burst BURST
// cburst BURST`.
type Shaper struct {
	Rate      uint64   `json:"rate"`  // bits/s
	Ceil      uint64   `json:"ceil"`  // bits/s, at least Rate
	Burst     uint32   `json:"burst"` // bytes
	Direction string   `json:"direction"`
	Devs      []string `json:"devs"` // resolved: the hop devices shaped
}

// Raw forms of the functions in a topology file.

type rawFirewall struct {
	Kind     string `yaml:"kind"`
	Rules    *int   `yaml:"rules"`
	Stateful bool   `yaml:"stateful"`
	Spread   bool   `yaml:"spread"`
	Backend  string `yaml:"backend"`
}

type rawShaper struct {
	Kind      string `yaml:"kind"`
	Rate      string `yaml:"rate"`
	Burst     string `yaml:"burst"`
	Ceil      string `yaml:"ceil"`
	Direction string `yaml:"direction"`
}

// decodeFunction decodes one entry of chain.functions strictly by its kind.
func (r *resolver) decodeFunction(n *yaml.Node, path string) (Function, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return Function{}, r.errf(path, "expected a mapping such as {kind: firewall, rules: 100}, got %s", nodeKind(n))
	}
	var kindNode *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "kind" {
			kindNode = n.Content[i+1]
		}
	}
	if kindNode == nil {
		return Function{}, r.errf(path+".kind", "is required (%s)", strings.Join(FunctionKinds, ", "))
	}
	if kindNode.Kind != yaml.ScalarNode || kindNode.ShortTag() != "!!str" {
		return Function{}, r.errf(path+".kind", "expected a function kind (%s), got %s", strings.Join(FunctionKinds, ", "), nodeKind(kindNode))
	}
	kind := kindNode.Value
	// yamlx finds a mistyped value by its line, which is ambiguous in a
	// one-line {kind: firewall, stateful: maybe}: check booleans here.
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		if (k == "stateful" || k == "spread") && v.ShortTag() != "!!bool" {
			return Function{}, r.errf(path+"."+k, "expected true or false, got %s", nodeKind(v))
		}
	}
	decode := func(out any) error {
		if err := yamlx.Decode(n, out, path); err != nil {
			var ye *yamlx.Error
			if errors.As(err, &ye) {
				return &input.Error{File: r.file, Path: ye.Path, Msg: ye.Msg}
			}
			return r.errf(path, "%v", err)
		}
		return nil
	}
	switch kind {
	case FunctionFirewall:
		var raw rawFirewall
		if err := decode(&raw); err != nil {
			return Function{}, err
		}
		fw := &Firewall{Stateful: raw.Stateful, Spread: raw.Spread, Backend: raw.Backend}
		if raw.Rules != nil {
			fw.Rules = *raw.Rules
		}
		return Function{Kind: FunctionFirewall, Firewall: fw}, nil
	case FunctionShaper:
		var raw rawShaper
		if err := decode(&raw); err != nil {
			return Function{}, err
		}
		if raw.Rate == "" {
			return Function{}, r.errf(path+".rate", "is required (e.g. rate: 1gbit; the seed used 1tbit)")
		}
		sh := &Shaper{Direction: raw.Direction}
		var err error
		if sh.Rate, err = ParseRate(raw.Rate); err != nil {
			return Function{}, r.errf(path+".rate", "%v", err)
		}
		if raw.Ceil != "" {
			if sh.Ceil, err = ParseRate(raw.Ceil); err != nil {
				return Function{}, r.errf(path+".ceil", "%v", err)
			}
		}
		if raw.Burst != "" {
			b, err := ParseSize(raw.Burst)
			if err != nil {
				return Function{}, r.errf(path+".burst", "%v", err)
			}
			if b < MinShaperBurst || b > MaxShaperBurst {
				return Function{}, r.errf(path+".burst", "%s is out of range (%d bytes to 4gb)", raw.Burst, MinShaperBurst)
			}
			sh.Burst = uint32(b)
		}
		return Function{Kind: FunctionShaper, Shaper: sh}, nil
	}
	return Function{}, r.errf(path+".kind", "unknown function kind %q (supported: %s)", kind, strings.Join(FunctionKinds, ", "))
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

// functions validates the chain's functions (decoded from the file, or
// given by a preset), fills in defaults and resolves them per hop. path
// names the list in errors.
func (r *resolver) functions(path string, in []Function, c *Chain) ([]Function, error) {
	var out []Function
	seen := map[string]int{}
	for i, f := range in {
		p := fmt.Sprintf("%s[%d]", path, i)
		if j, dup := seen[f.Kind]; dup {
			return nil, r.errf(p+".kind", "a second %s (the first is %s[%d]): a hop holds at most one function of each kind", f.Kind, path, j)
		}
		seen[f.Kind] = i
		switch {
		case f.Kind == FunctionFirewall && f.Firewall != nil && f.Shaper == nil:
			fw, err := r.firewall(p, *f.Firewall, c)
			if err != nil {
				return nil, err
			}
			out = append(out, Function{Kind: f.Kind, Firewall: fw})
		case f.Kind == FunctionShaper && f.Shaper != nil && f.Firewall == nil:
			sh, err := r.shaper(p, *f.Shaper, c)
			if err != nil {
				return nil, err
			}
			out = append(out, Function{Kind: f.Kind, Shaper: sh})
		case f.Kind != FunctionFirewall && f.Kind != FunctionShaper:
			return nil, r.errf(p+".kind", "unknown function kind %q (supported: %s)", f.Kind, strings.Join(FunctionKinds, ", "))
		default:
			return nil, r.errf(p, "a %s function needs its %s settings and no others", f.Kind, f.Kind)
		}
	}
	return out, nil
}

func (r *resolver) firewall(path string, fw Firewall, c *Chain) (*Firewall, error) {
	if fw.Rules < 0 || fw.Rules > MaxFirewallRules {
		return nil, r.errf(path+".rules", "%d is out of range (0 to %d)", fw.Rules, MaxFirewallRules)
	}
	switch fw.Backend {
	case "":
		fw.Backend = BackendLegacy
	case BackendLegacy, BackendNFT:
	default:
		return nil, r.errf(path+".backend", "unknown iptables backend %q (legacy, nft)", fw.Backend)
	}
	// The namespaces the client's packets cross: the hops, then the server.
	crossed := make([]int, c.Length+1)
	for i := range crossed {
		crossed[i] = fw.Rules
		if fw.Spread {
			crossed[i] = fw.Rules / len(crossed)
			if i < fw.Rules%len(crossed) {
				crossed[i]++
			}
		}
	}
	fw.HopRules, fw.ServerRules = crossed[:c.Length], crossed[c.Length]
	if !fw.Spread {
		fw.ClientRules = fw.Rules
	}
	return &fw, nil
}

func (r *resolver) shaper(path string, sh Shaper, c *Chain) (*Shaper, error) {
	if sh.Rate < MinShaperRate || sh.Rate > MaxShaperRate {
		return nil, r.errf(path+".rate", "%s is out of range (1mbit to 10tbit)", FormatRate(sh.Rate))
	}
	if sh.Ceil == 0 {
		sh.Ceil = sh.Rate
	}
	if sh.Ceil < sh.Rate || sh.Ceil > MaxShaperRate {
		return nil, r.errf(path+".ceil", "%s is out of range (the rate, %s, to 10tbit)", FormatRate(sh.Ceil), FormatRate(sh.Rate))
	}
	bytesPerSec := float64(sh.Rate) / 8
	switch {
	case sh.Burst == 0 && sh.Direction == ShapeAll:
		// The seed's "large buffer": a second at the rate, as far as
		// HTB's 32-bit burst reaches (34 ms at 1tbit).
		sh.Burst = uint32(max(defaultBurstMin, min(bytesPerSec, MaxShaperBurst)))
	case sh.Burst == 0:
		sh.Burst = uint32(max(defaultBurstMin, min(bytesPerSec/defaultBurstTime, MaxShaperBurst)))
	case sh.Burst < MinShaperBurst:
		return nil, r.errf(path+".burst", "%d bytes is below %d (a full-size frame)", sh.Burst, MinShaperBurst)
	}
	if t := float64(sh.Burst) / bytesPerSec; t > maxBurstSeconds {
		return nil, r.errf(path+".burst", "%d bytes take %.0f s to send at %s: at most %d s of traffic (lower the burst or raise the rate)",
			sh.Burst, t, FormatRate(sh.Rate), maxBurstSeconds)
	}
	switch sh.Direction {
	case "":
		sh.Direction = ShapeToServer
	case ShapeToServer, ShapeToClient, ShapeBoth, ShapeAll:
	default:
		return nil, r.errf(path+".direction", "unknown direction %q (server: egress towards the server, client: towards the client, both, all: every interface of every namespace, the ends included)", sh.Direction)
	}
	if c.Length == 0 && sh.Direction != ShapeAll {
		return nil, r.errf(path, "a direct pair (chain.length 0) has no hop to shape in: use a length of 1 or more, or direction: all (the ends' interfaces, as the seed)")
	}
	if c.Length == 0 {
		return &sh, nil // direction all: the ends only (buildFunctions)
	}
	// Every hop has the same device names: eth0 towards the client, eth1
	// towards the server (see buildChain).
	toServer, toClient := c.Segments[1].LeftDev, c.Segments[0].RightDev
	switch sh.Direction {
	case ShapeToServer:
		sh.Devs = []string{toServer}
	case ShapeToClient:
		sh.Devs = []string{toClient}
	default:
		sh.Devs = []string{toServer, toClient}
	}
	return &sh, nil
}

// rateUnits are tc's rate units (iproute2 tc_util.c get_rate64), matched
// without regard to case as tc does: bits per second, or bytes per second
// with "Bps" (so kbps is kilobytes per second, as in tc).
var rateUnits = []struct {
	name  string
	scale float64
}{
	{"bit", 1}, {"kibit", 1 << 10}, {"kbit", 1e3}, {"mibit", 1 << 20}, {"mbit", 1e6},
	{"gibit", 1 << 30}, {"gbit", 1e9}, {"tibit", 1 << 40}, {"tbit", 1e12},
	{"bps", 8}, {"kibps", 8 << 10}, {"kbps", 8e3}, {"mibps", 8 << 20}, {"mbps", 8e6},
	{"gibps", 8 << 30}, {"gbps", 8e9}, {"tibps", 8 << 40}, {"tbps", 8e12},
}

// ParseRate reads a rate in tc's syntax (1gbit, 100mbit, 1.5tbit, 10MBps)
// into bits per second. Unlike tc it wants a unit: a bare number is an
// error rather than bits per second.
func ParseRate(s string) (uint64, error) {
	num, unit := splitNumber(s)
	v, err := strconv.ParseFloat(num, 64)
	if num == "" || err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q is not a rate (e.g. 100mbit, 1gbit, 1tbit)", s)
	}
	if unit == "" {
		return 0, fmt.Errorf("%q has no unit (e.g. %smbit or %sgbit)", s, num, num)
	}
	for _, u := range rateUnits {
		if strings.EqualFold(unit, u.name) {
			bits := v * u.scale
			if bits >= math.MaxUint64 {
				return 0, fmt.Errorf("%q is too large", s)
			}
			return uint64(bits), nil
		}
	}
	return 0, fmt.Errorf("%q: unknown unit %q (bit, kbit, mbit, gbit, tbit, their kibit... forms, or bytes per second: bps, kbps, mbps...)", s, unit)
}

// FormatRate writes bits per second the way tc shows them (10mbit, 1tbit).
func FormatRate(bits uint64) string {
	for _, u := range []struct {
		name  string
		scale uint64
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if bits >= u.scale && bits%u.scale == 0 {
			return fmt.Sprintf("%d%s", bits/u.scale, u.name)
		}
	}
	return fmt.Sprintf("%dbit", bits)
}

// sizeUnits are tc's size units (iproute2 get_size): bytes, binary
// multiples, or bits.
var sizeUnits = []struct {
	name  string
	scale float64
}{
	{"", 1}, {"b", 1}, {"k", 1 << 10}, {"kb", 1 << 10}, {"m", 1 << 20}, {"mb", 1 << 20},
	{"g", 1 << 30}, {"gb", 1 << 30}, {"kbit", 1 << 10 / 8}, {"mbit", 1 << 20 / 8}, {"gbit", 1 << 30 / 8},
}

// ParseSize reads a size in tc's syntax (bytes, or 64k, 1mb, 10kbit) into
// bytes.
func ParseSize(s string) (uint64, error) {
	num, unit := splitNumber(s)
	v, err := strconv.ParseFloat(num, 64)
	if num == "" || err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q is not a size (e.g. 64k, 1mb, 1500)", s)
	}
	for _, u := range sizeUnits {
		if strings.EqualFold(unit, u.name) {
			b := v * u.scale
			if b >= math.MaxUint64 {
				return 0, fmt.Errorf("%q is too large", s)
			}
			return uint64(b), nil
		}
	}
	return 0, fmt.Errorf("%q: unknown unit %q (bytes, k, m, g, or kbit, mbit, gbit)", s, unit)
}

// splitNumber splits "1.5gbit" into "1.5" and "gbit".
func splitNumber(s string) (num, unit string) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	return s[:i], s[i:]
}

// FillerRules returns n iptables rules (in iptables-restore syntax, without
// "-A CHAIN") that never match lab traffic, shaped like a real policy rule
// (source, destination, protocol and port): distinct sources from the
// benchmarking range 198.18.0.0/15 (131,072 addresses, more than
// MaxFiller) towards TEST-NET-3 203.0.113.1, which no lab uses. The
// iptables datapath's filler and the chain firewall both use them.
func FillerRules(n int) []string { return FillerRulesOf(n, 4) }

// FillerRulesOf is FillerRules for the table of family fam: for IPv6
// (ip6tables) the same rules between addresses of the documentation range
// 2001:db8::/32 that embed the IPv4 ones, so that they match nothing
// either and cost the same per packet.
func FillerRulesOf(n, fam int) []string {
	if fam == 6 {
		out := make([]string, n)
		for i := 0; i < n; i++ {
			v := 198<<24 | 18<<16 + uint32(i)
			out[i] = fmt.Sprintf("-s 2001:db8::%x:%x/128 -d 2001:db8::cb00:7101/128 -p tcp -m tcp --dport %d -j ACCEPT",
				v>>16, v&0xffff, 1024+i%60000)
		}
		return out
	}
	out := make([]string, n)
	for i := 0; i < n; i++ {
		v := 198<<24 | 18<<16 + uint32(i)
		out[i] = fmt.Sprintf("-s %d.%d.%d.%d/32 -d 203.0.113.1/32 -p tcp -m tcp --dport %d -j ACCEPT",
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v), 1024+i%60000)
	}
	return out
}

// FirewallChain is the chain of a firewall function's rules.
const FirewallChain = "CNLAB-FW"

// maxConnbytes is the largest count -m connbytes takes (a signed 64-bit
// integer): ranges just below it match no real connection.
const maxConnbytes = 1<<63 - 1

// FirewallScript is the iptables-restore input that sets up a firewall in
// one namespace of a chain holding rules rules: chain CNLAB-FW with the
// rules (stateless filler, or stateful connbytes rules), jumped to from
// INPUT, and from FORWARD too when forward is set (a hop). Every policy
// stays ACCEPT, as in the seed: no rule ever matches the chain's traffic.
// It is pure, so it is tested without root.
func FirewallScript(fw *Firewall, rules int, forward bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:%s - [0:0]\n", FirewallChain)
	fmt.Fprintf(&b, "-A INPUT -j %s\n", FirewallChain)
	if forward {
		fmt.Fprintf(&b, "-A FORWARD -j %s\n", FirewallChain)
	}
	if fw.Stateful {
		// Seed 001's stateful rules ("count the bytes of all
		// connections"): each looks the packet's connection up in
		// conntrack and compares its reply byte count with a range no
		// connection reaches, so every packet walks all of them.
		for i := 0; i < rules; i++ {
			hi := uint64(maxConnbytes - i)
			fmt.Fprintf(&b, "-A %s -m connbytes --connbytes %d:%d --connbytes-dir reply --connbytes-mode bytes -j ACCEPT\n", FirewallChain, hi-1, hi)
		}
	} else {
		for _, r := range FillerRules(rules) {
			fmt.Fprintf(&b, "-A %s %s\n", FirewallChain, r)
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// iptablesRestore names the restore program of a backend.
func iptablesRestore(backend string) string {
	restore, _, _ := kind.IPTablesOptions{Backend: backend}.Tools()
	return restore
}
