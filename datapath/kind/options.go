package kind

import (
	"fmt"

	"github.com/cnlab/cnlab/internal/input"
)

// Options are the resolved options of the datapaths, as a lab's spec
// carries them (defaults filled in for every kind; only the lab's own
// kind's are used).
type Options struct {
	IPTables IPTablesOptions `json:"iptables"`
	EBPF     EBPFOptions     `json:"ebpf"`
}

// RawOptions are the datapath sections of a topology file, as written.
type RawOptions struct {
	IPTables *RawIPTables `yaml:"iptables"`
	EBPF     *RawEBPF     `yaml:"ebpf"`
}

// RawIPTables is the iptables: section of a topology file.
type RawIPTables struct {
	Filler     *int   `yaml:"filler"`
	FillerMode string `yaml:"fillerMode"`
	Backend    string `yaml:"backend"`
	Peers      string `yaml:"peers"`
}

// RawEBPF is the ebpf: section of a topology file.
type RawEBPF struct {
	HostRouting   string `yaml:"hostRouting"`
	PolicyMapSize *int   `yaml:"policyMapSize"`
	CTMapSize     *int   `yaml:"ctMapSize"`
	MaxEndpoints  *int   `yaml:"maxEndpoints"`
	ConnectHook   bool   `yaml:"connectHook"`
	SocketLB      bool   `yaml:"socketLB"`
}

// Filler modes of the iptables datapath (seed 000's two iptables settings).
const (
	FillerNoMatch    = "no-match"     // filler rules before everything: every packet walks them
	FillerTopOfChain = "top-of-chain" // after the rule accepting established traffic
)

// Backends of the iptables datapath.
const (
	BackendLegacy = "legacy" // x_tables
	BackendNFT    = "nft"    // iptables-nft, on nf_tables
)

// How the iptables datapath matches a rule's peers.
const (
	// PeersAddresses writes one rule per peer address (prefix): Docker's
	// and kube-router's way, and the default.
	PeersAddresses = "addresses"
	// PeersIPSets puts the addresses of each peer term as written (a
	// selector, a CIDR) in an ipset and matches it with one rule per term
	// and port, as Calico's felix does: a term that selects nobody still
	// costs a set and a rule.
	PeersIPSets = "ipsets"
)

// MaxFiller bounds the iptables filler rules.
const MaxFiller = 100000

// IPTablesOptions tune the iptables datapath.
type IPTablesOptions struct {
	Filler     int    `json:"filler"`     // rules that match nothing
	FillerMode string `json:"fillerMode"` // no-match or top-of-chain
	Backend    string `json:"backend"`    // legacy (x_tables) or nft
	Peers      string `json:"peers"`      // addresses or ipsets ("" in ledgers written before it: addresses)
}

// IPSets reports whether peers are matched through ipsets.
func (o IPTablesOptions) IPSets() bool { return o.Peers == PeersIPSets }

// Tools returns the programs of the options' backend: iptables-restore,
// iptables-save and iptables.
func (o IPTablesOptions) Tools() (restore, save, bin string) {
	if o.Backend == BackendNFT {
		return "iptables-nft-restore", "iptables-nft-save", "iptables-nft"
	}
	return "iptables-legacy-restore", "iptables-legacy-save", "iptables-legacy"
}

// Host routing modes of the eBPF datapath (Cilium's names).
const (
	HostRoutingBPF    = "bpf"    // same-host traffic redirected veth to veth, no bridge
	HostRoutingLegacy = "legacy" // endpoints stay on the bridge; programs only filter
)

// Bounds and defaults of the eBPF datapath's map sizes.
const (
	DefaultPolicyMapSize = 65536
	MaxPolicyMapSize     = 1 << 22
	DefaultCTMapSize     = 65536
	MaxCTMapSize         = 1 << 24
	DefaultMaxEndpoints  = 1024
	MaxMaxEndpoints      = 16384
)

// EBPFOptions tune the eBPF datapath.
type EBPFOptions struct {
	HostRouting   string `json:"hostRouting"`
	PolicyMapSize int    `json:"policyMapSize"` // entries per endpoint policy map
	CTMapSize     int    `json:"ctMapSize"`     // conntrack entries per host
	MaxEndpoints  int    `json:"maxEndpoints"`  // endpoints per host
	ConnectHook   bool   `json:"connectHook"`   // refuse denied TCP connects at the socket
	SocketLB      bool   `json:"socketLB"`      // translate connections to Services at the socket
}

// Overrides set datapath options from the command line (--filler,
// --ipsets, --host-routing, --connect-hook, --socket-lb). Empty fields
// change nothing.
type Overrides struct {
	Filler      *int   // iptables filler rules
	FillerMode  string // iptables filler mode
	Peers       string // iptables peer matching (addresses, ipsets)
	HostRouting string // ebpf host routing
	ConnectHook bool   // ebpf socket-level enforcement
	SocketLB    bool   // ebpf socket-level service translation
}

// Apply writes the overrides into a file's raw options, refusing options
// of another datapath than k (the lab's, once --datapath is applied). Its
// errors name the flag.
func (ov Overrides) Apply(k Kind, raw *RawOptions) error {
	if ov.HostRouting != "" || ov.ConnectHook || ov.SocketLB {
		flag := "--host-routing"
		switch {
		case ov.HostRouting != "":
		case ov.ConnectHook:
			flag = "--connect-hook"
		default:
			flag = "--socket-lb"
		}
		if k != EBPF {
			return &input.Error{File: flag, Msg: fmt.Sprintf("an option of the %s datapath, but the lab's datapath is %s", EBPF, k)}
		}
		if ov.HostRouting != "" && ov.HostRouting != HostRoutingBPF && ov.HostRouting != HostRoutingLegacy {
			return &input.Error{File: "--host-routing", Msg: fmt.Sprintf("unknown mode %q (%s, %s)", ov.HostRouting, HostRoutingBPF, HostRoutingLegacy)}
		}
		if raw.EBPF == nil {
			raw.EBPF = &RawEBPF{}
		}
		if ov.HostRouting != "" {
			raw.EBPF.HostRouting = ov.HostRouting
		}
		raw.EBPF.ConnectHook = raw.EBPF.ConnectHook || ov.ConnectHook
		raw.EBPF.SocketLB = raw.EBPF.SocketLB || ov.SocketLB
	}
	if ov.Filler != nil || ov.FillerMode != "" {
		if k != IPTables {
			return &input.Error{File: "--filler", Msg: fmt.Sprintf("filler rules are for the %s datapath, but the lab's datapath is %s", IPTables, k)}
		}
		if raw.IPTables == nil {
			raw.IPTables = &RawIPTables{}
		}
		if ov.Filler != nil {
			raw.IPTables.Filler = ov.Filler
		}
		if ov.FillerMode != "" {
			raw.IPTables.FillerMode = ov.FillerMode
		}
	}
	if ov.Peers != "" {
		if k != IPTables {
			return &input.Error{File: "--ipsets", Msg: fmt.Sprintf("an option of the %s datapath, but the lab's datapath is %s", IPTables, k)}
		}
		if raw.IPTables == nil {
			raw.IPTables = &RawIPTables{}
		}
		raw.IPTables.Peers = ov.Peers
	}
	return nil
}

// Resolve checks a file's datapath sections against the lab's kind and
// fills in the defaults. Its errors name the file and the YAML path.
func Resolve(file string, k Kind, raw RawOptions) (Options, error) {
	errf := func(path, format string, args ...any) error {
		return &input.Error{File: file, Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	o := Options{
		IPTables: IPTablesOptions{FillerMode: FillerNoMatch, Backend: BackendLegacy, Peers: PeersAddresses},
		EBPF: EBPFOptions{HostRouting: HostRoutingBPF, PolicyMapSize: DefaultPolicyMapSize,
			CTMapSize: DefaultCTMapSize, MaxEndpoints: DefaultMaxEndpoints},
	}
	if ip := raw.IPTables; ip != nil {
		if k != IPTables {
			return o, errf(string(IPTables), "options for the %s datapath, but the lab's datapath is %s", IPTables, k)
		}
		if ip.Filler != nil {
			if *ip.Filler < 0 || *ip.Filler > MaxFiller {
				return o, errf("iptables.filler", "%d is out of range (0 to %d)", *ip.Filler, MaxFiller)
			}
			o.IPTables.Filler = *ip.Filler
		}
		switch ip.FillerMode {
		case "":
		case FillerNoMatch, FillerTopOfChain:
			o.IPTables.FillerMode = ip.FillerMode
		default:
			return o, errf("iptables.fillerMode", "unknown mode %q (%s, %s)", ip.FillerMode, FillerNoMatch, FillerTopOfChain)
		}
		switch ip.Backend {
		case "":
		case BackendLegacy, BackendNFT:
			o.IPTables.Backend = ip.Backend
		default:
			return o, errf("iptables.backend", "unknown backend %q (%s, %s)", ip.Backend, BackendLegacy, BackendNFT)
		}
		switch ip.Peers {
		case "":
		case PeersAddresses, PeersIPSets:
			o.IPTables.Peers = ip.Peers
		default:
			return o, errf("iptables.peers", "unknown mode %q (%s, %s)", ip.Peers, PeersAddresses, PeersIPSets)
		}
	}
	if e := raw.EBPF; e != nil {
		if k != EBPF {
			return o, errf(string(EBPF), "options for the %s datapath, but the lab's datapath is %s (add datapath: %s, or use --datapath %s)", EBPF, k, EBPF, EBPF)
		}
		switch e.HostRouting {
		case "":
		case HostRoutingBPF, HostRoutingLegacy:
			o.EBPF.HostRouting = e.HostRouting
		default:
			return o, errf("ebpf.hostRouting", "unknown mode %q (%s, %s)", e.HostRouting, HostRoutingBPF, HostRoutingLegacy)
		}
		o.EBPF.ConnectHook = e.ConnectHook
		o.EBPF.SocketLB = e.SocketLB
		for _, f := range []struct {
			name    string
			v       *int
			dst     *int
			lo, max int
		}{
			{"policyMapSize", e.PolicyMapSize, &o.EBPF.PolicyMapSize, 1, MaxPolicyMapSize},
			{"ctMapSize", e.CTMapSize, &o.EBPF.CTMapSize, 1024, MaxCTMapSize},
			{"maxEndpoints", e.MaxEndpoints, &o.EBPF.MaxEndpoints, 1, MaxMaxEndpoints},
		} {
			if f.v == nil {
				continue
			}
			if *f.v < f.lo || *f.v > f.max {
				return o, errf("ebpf."+f.name, "%d is out of range (%d to %d)", *f.v, f.lo, f.max)
			}
			*f.dst = *f.v
		}
	}
	return o, nil
}

// CheckEndpoints checks that each host's endpoints fit what the datapath
// can hold (the eBPF datapath's per-host maps), so that a lab that could
// not be set up is refused before anything is built. endpoints counts the
// endpoints of each host, in the order of hosts.
func CheckEndpoints(file string, k Kind, o *Options, hosts []string, endpoints map[string]int) error {
	if k != EBPF {
		return nil
	}
	for _, h := range hosts {
		if n := endpoints[h]; n > o.EBPF.MaxEndpoints {
			return &input.Error{File: file, Path: "ebpf.maxEndpoints", Msg: fmt.Sprintf("host %s has %d endpoints, more than %d (raise ebpf.maxEndpoints, at most %d)", h, n, o.EBPF.MaxEndpoints, MaxMaxEndpoints)}
		}
	}
	return nil
}
