// Package kind names the datapaths a lab can enforce policy with, and says
// of each — without touching the kernel — what it is, what this machine
// must have to run it, which options a topology file may give it, and how
// status shows them. It is the one list of datapaths: topology, experiment,
// report and the CLI take the names and the default from here, and the
// registry (datapath/registry) binds each kind to its implementation.
//
// Each kind is declared once, by its Descriptor in this package: its
// name, summary, tools, options, the service proxies it pairs with and its
// default proxy. Nothing else lists the kinds: messages, help text and
// tests take them from All and Proxies, and datapath/registry's test
// checks that the implementations match them one for one. A kind that is
// not built in (a test's stand-in datapath) is added with Register.
//
// It is a leaf: it imports nothing of cnlab's but internal/input and
// internal/plural, so that
// topology can resolve a lab's datapath options without importing the
// implementations. It never touches the kernel.
package kind

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"github.com/cnlab/cnlab/internal/plural"
	"golang.org/x/sys/unix"
)

// Kind names a datapath implementation, as topology files and --datapath
// write it.
type Kind string

// The datapaths.
const (
	IPTables Kind = "iptables" // Docker-style: chains per endpoint, matched top-down
	NFTables Kind = "nftables" // sets and verdict maps, one transaction per host
	EBPF     Kind = "ebpf"     // tc/tcx programs, one hash lookup per packet on identities
	// None is the datapath of labs that enforce no policy: chains, whose
	// hops carry network functions instead.
	None Kind = "none"
)

// Default is the datapath of a lab whose file names none.
const Default = IPTables

// Tool is a program a datapath runs.
type Tool struct {
	Name    string   // the program, looked up in PATH
	Package string   // the Debian package that has it
	Version []string // arguments that print its version ("--version")
}

// Descriptor is everything about a datapath that needs no kernel.
type Descriptor struct {
	Kind    Kind
	Summary string
	// Tools lists the programs the datapath may run (which of them a lab
	// needs can depend on its options: see Missing).
	Tools []Tool
	// Proxies lists the service proxies a lab of this kind may have
	// (besides none, which any lab may have): see Proxy.Pairs.
	Proxies []Proxy
	// DefaultProxy is the service proxy of a lab whose file names none;
	// "" is none.
	DefaultProxy Proxy
	// MayRefuse says that the datapath may refuse a policy it cannot
	// enforce: its Apply fails and the lab keeps enforcing what it
	// enforced before. Conformance tests then check that nothing changed
	// instead of the model's verdicts. No built-in kind refuses.
	MayRefuse bool
	// refuseProxy says why the kind refuses a proxy it does not list in
	// Proxies; nil lets the proxy say why (proxyDescriptor.refuse).
	refuseProxy func(p Proxy) string
	// needs returns the programs a lab with these options runs.
	needs func(o *Options) []string
	// kernel says what the running kernel lacks, "" when nothing.
	kernel func() string
	// describe shows the options that matter for this kind, for status.
	describe func(o *Options) string
	// view keeps this kind's options for status -o json.
	view func(o *Options) OptionsView
}

var descriptors = []Descriptor{
	{
		Kind:    IPTables,
		Summary: "iptables chains per endpoint, matched top-down (Docker's way)",
		Tools: []Tool{
			{"iptables-legacy-restore", "iptables", nil},
			{"iptables-legacy-save", "iptables", nil},
			{"iptables-nft-restore", "iptables", nil},
			{"iptables-nft-save", "iptables", nil},
			// A lab with IPv6: the same chains in ip6tables (same package).
			{"ip6tables-legacy-restore", "iptables", nil},
			{"ip6tables-legacy-save", "iptables", nil},
			{"ip6tables-legacy", "iptables", nil},
			{"ip6tables-nft-restore", "iptables", nil},
			{"ip6tables-nft-save", "iptables", nil},
			{"ip6tables-nft", "iptables", nil},
			{"iptables-nft", "iptables", nil},
			{"iptables", "iptables", []string{"--version"}},
			{"iptables-legacy", "iptables", []string{"--version"}},
			{"nft", "nftables", nil},                // the bridge table binding endpoint ports
			{"ipset", "ipset", []string{"version"}}, // peers: ipsets
		},
		needs: func(o *Options) []string { // what Setup and Apply run
			restore, _, bin := o.IPTables.Tools()
			if o.IPTables.IPSets() {
				return []string{restore, bin, "nft", "ipset"}
			}
			return []string{restore, bin, "nft"}
		},
		describe: func(o *Options) string {
			ip := o.IPTables
			s := ip.Backend + " backend"
			if ip.IPSets() {
				s += ", peers in ipsets"
			}
			if ip.Filler > 0 {
				s += fmt.Sprintf(", %s %s", plural.N(ip.Filler, "filler rule"), ip.FillerMode)
			}
			return s
		},
		view:         func(o *Options) OptionsView { ip := o.IPTables; return OptionsView{IPTables: &ip} },
		Proxies:      []Proxy{ProxyIPTables, ProxyNFTables},
		DefaultProxy: ProxyIPTables,
	},
	{
		Kind:         NFTables,
		Summary:      "an nftables table per host: sets and verdict maps",
		Tools:        []Tool{{"nft", "nftables", []string{"--version"}}},
		needs:        func(*Options) []string { return []string{"nft"} },
		Proxies:      []Proxy{ProxyIPTables, ProxyNFTables},
		DefaultProxy: ProxyNFTables,
	},
	{
		Kind:         EBPF,
		Summary:      "tc programs on each veth: one hash lookup per packet (Cilium's way)",
		kernel:       ebpfKernelMissing,
		Proxies:      []Proxy{ProxyEBPF},
		DefaultProxy: ProxyEBPF,
		// A netfilter proxy translates in PREROUTING, after the eBPF
		// datapath's tc programs judged the packet: eBPF policy would see
		// the service address, not the backend.
		refuseProxy: func(p Proxy) string {
			return fmt.Sprintf("the %s service proxy translates in netfilter's PREROUTING, after the eBPF datapath's programs judged the packet against the service address instead of the backend; use --service-proxy %s with the %s datapath", p, ProxyEBPF, EBPF)
		},
		describe: func(o *Options) string {
			s := "host routing " + o.EBPF.HostRouting
			if o.EBPF.ConnectHook {
				s += ", connect hook"
			}
			if o.EBPF.SocketLB {
				s += ", socket LB"
			}
			return s
		},
		view: func(o *Options) OptionsView { e := o.EBPF; return OptionsView{EBPF: &e} },
	},
}

// registered are the kinds added with Register, after the built-in ones.
var registered struct {
	sync.RWMutex
	kinds []*Descriptor
}

// table returns every kind's descriptor: the built-in ones, then the
// registered ones.
func table() []*Descriptor {
	registered.RLock()
	defer registered.RUnlock()
	out := make([]*Descriptor, 0, len(descriptors)+len(registered.kinds))
	for i := range descriptors {
		out = append(out, &descriptors[i])
	}
	return append(out, registered.kinds...)
}

// Register adds a kind that is not built in — a test's stand-in datapath —
// after the built-in ones, and returns the function that removes it. The
// kind's implementation is registered beside it (datapath/registry's
// Register does both). A name already taken, none or "" is refused.
func Register(d Descriptor) (remove func(), err error) {
	for _, p := range d.Proxies {
		if getProxy(p) == nil {
			return nil, fmt.Errorf("register datapath %q: unknown service proxy %q", d.Kind, p)
		}
	}
	if d.DefaultProxy != "" && !slices.Contains(d.Proxies, d.DefaultProxy) {
		return nil, fmt.Errorf("register datapath %q: its default service proxy %q is not one it pairs with", d.Kind, d.DefaultProxy)
	}
	dp := &d
	registered.Lock()
	defer registered.Unlock()
	if d.Kind == "" || d.Kind == None ||
		slices.ContainsFunc(descriptors, func(x Descriptor) bool { return x.Kind == d.Kind }) ||
		slices.ContainsFunc(registered.kinds, func(x *Descriptor) bool { return x.Kind == d.Kind }) {
		return nil, fmt.Errorf("register datapath %q: the name is taken", d.Kind)
	}
	registered.kinds = append(registered.kinds, dp)
	return func() {
		registered.Lock()
		defer registered.Unlock()
		registered.kinds = slices.DeleteFunc(registered.kinds, func(x *Descriptor) bool { return x == dp })
	}, nil
}

// All returns the datapaths, in the order help text lists them.
func All() []Kind {
	t := table()
	out := make([]Kind, len(t))
	for i, d := range t {
		out[i] = d.Kind
	}
	return out
}

// Names returns the datapaths' names joined for a message: "iptables,
// nftables, ebpf".
func Names() string {
	var s []string
	for _, k := range All() {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// Parse returns the kind of that name; an unknown name lists the valid
// ones.
func Parse(name string) (Kind, error) {
	if d := Get(Kind(name)); d != nil {
		return d.Kind, nil
	}
	return "", fmt.Errorf("unknown datapath %q (supported: %s)", name, Names())
}

// Get returns the descriptor of a kind; nil for None or an unknown kind.
func Get(k Kind) *Descriptor {
	for _, d := range table() {
		if d.Kind == k {
			return d
		}
	}
	return nil
}

// String returns the name.
func (k Kind) String() string { return string(k) }

// Missing says what this machine lacks to run a lab of this kind with
// these options ("nft is not installed (Debian package nftables)"), or ""
// when nothing is missing.
func (k Kind) Missing(o *Options) string {
	d := Get(k)
	if d == nil {
		return ""
	}
	if d.needs != nil {
		for _, name := range d.needs(o) {
			if _, err := exec.LookPath(name); err != nil {
				return fmt.Sprintf("%s is not installed (Debian package %s)", name, d.packageOf(name))
			}
		}
	}
	if d.kernel != nil {
		return d.kernel()
	}
	return ""
}

func (d *Descriptor) packageOf(tool string) string {
	for _, t := range d.Tools {
		if t.Name == tool {
			return t.Package
		}
	}
	return tool
}

// Describe shows the options of a kind that status prints ("legacy
// backend"), or "" when it has none.
func (k Kind) Describe(o *Options) string {
	if d := Get(k); d != nil && d.describe != nil {
		return d.describe(o)
	}
	return ""
}

// OptionsView holds the options of one kind, for JSON output: the other
// kinds' fields stay nil and are omitted.
type OptionsView struct {
	IPTables *IPTablesOptions `json:"iptables,omitempty"`
	EBPF     *EBPFOptions     `json:"ebpf,omitempty"`
}

// View returns the options of kind k alone.
func (k Kind) View(o *Options) OptionsView {
	if d := Get(k); d != nil && d.view != nil {
		return d.view(o)
	}
	return OptionsView{}
}

// VersionTools lists every program of every datapath that prints a
// version, for the environment a run records.
func VersionTools() []Tool {
	var out []Tool
	for _, d := range table() {
		for _, t := range d.Tools {
			if t.Version != nil {
				out = append(out, t)
			}
		}
	}
	return out
}

// ebpfKernelMissing says why this kernel cannot run the eBPF datapath: it
// needs BTF and tcx (6.6 or later).
func ebpfKernelMissing() string {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		var major, minor int
		if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err == nil && (major < 6 || major == 6 && minor < 6) {
			return fmt.Sprintf("kernel %d.%d has no tcx (6.6 or later)", major, minor)
		}
	}
	return ""
}
