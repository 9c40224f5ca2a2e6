package lab

import (
	"context"
	"fmt"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// refuser is a fourth datapath, registered for this package's tests only
// (TestMain): it sets nothing up and refuses every policy that would make
// a host enforce anything, so a lab of this kind allows every flow. Its
// descriptor says it may refuse, so the scenario run (TestScenarios),
// which iterates the registry, expects each refused scenario to leave the
// lab as it was instead of the model's verdicts. It shows that a datapath
// added to the registry gets the conformance runs without a test naming
// it.
const refuser = kind.Kind("refuser")

type refuserDatapath struct{}

func (refuserDatapath) Setup(context.Context, *topology.Spec) error { return nil }

func (refuserDatapath) Apply(_ context.Context, _ *topology.Spec, c *policy.Compiled) error {
	if len(c.Enforced) > 0 || len(c.Rules) > 0 || len(c.HTTP) > 0 {
		return fmt.Errorf("the %s datapath enforces no policy", refuser)
	}
	return nil
}

func (refuserDatapath) Describe(_ context.Context, lab *topology.Spec) (map[string]string, error) {
	out := map[string]string{}
	for _, h := range lab.Hosts {
		out[h.Name] = ""
	}
	return out, nil
}

// registerRefuser adds the refuser to the registry, for TestMain.
func registerRefuser() {
	_, err := registry.Register(
		kind.Descriptor{Kind: refuser, Summary: "a test's datapath that refuses every policy", MayRefuse: true},
		datapath.Descriptor{Kind: refuser, New: func() datapath.Datapath { return refuserDatapath{} }})
	if err != nil {
		panic(err)
	}
}

// optionVariants are option settings run beside a kind's defaults
// because they change how it enforces. They name their kind because each
// is an option of that kind alone (iptables' peers: ipsets, eBPF's legacy
// host routing); scenarioLab sets them.
var optionVariants = map[kind.Kind][]string{
	kind.IPTables: {"iptables-ipsets"},
	kind.EBPF:     {"ebpf-legacy"},
}

// allDatapaths are the datapaths the scenario run covers: every kind of
// the registry, each followed by its option variants.
func allDatapaths() []string {
	var out []string
	for _, k := range kind.All() {
		out = append(out, string(k))
		out = append(out, optionVariants[k]...)
	}
	return out
}

// datapaths are the datapaths every kernel test that needs its policies
// enforced runs on: those of allDatapaths whose kind enforces every
// policy (kind.Descriptor.MayRefuse unset).
func datapaths() []string {
	var out []string
	for _, dp := range allDatapaths() {
		if !kind.Get(kindOf(dp)).MayRefuse {
			out = append(out, dp)
		}
	}
	return out
}

// enforcingKinds are the kinds of the registry that enforce every
// policy, with their default options: the tests that run once per kind.
func enforcingKinds() []string {
	var out []string
	for _, k := range kind.All() {
		if !kind.Get(k).MayRefuse {
			out = append(out, string(k))
		}
	}
	return out
}

// serviceLab is one lab of TestServiceScenarios.
type serviceLab struct {
	name, dp, proxy, link string
	socketLB              bool
}

// serviceLabs are the labs TestServiceScenarios runs, from the registry:
// each service proxy on each datapath it pairs with, the links alternating
// between a wire and a VXLAN overlay (both on a proxy's only datapath);
// and the eBPF proxy with socket LB, named because it is an option of
// that proxy's datapath alone.
func serviceLabs() []serviceLab {
	var out []serviceLab
	for _, p := range kind.ServingProxies() {
		px := string(p)
		var dps []kind.Kind
		for _, k := range p.Datapaths() {
			if !kind.Get(k).MayRefuse {
				dps = append(dps, k)
			}
		}
		for i, k := range dps {
			links := []string{"wire", "vxlan"}
			if len(dps) > 1 {
				links = links[i%2 : i%2+1]
			}
			for _, link := range links {
				name := "t-svs-" + shortName(px) + "-" + link[:1]
				if i >= 2 {
					name += fmt.Sprint(i) // a third datapath of the proxy's
				}
				out = append(out, serviceLab{name, string(k), px, link, false})
			}
		}
	}
	return append(out, serviceLab{"t-svs-ebpf-sw", string(kind.EBPF), string(kind.ProxyEBPF), "wire", true})
}

// kindOf returns the kind of a datapath or variant name.
func kindOf(dp string) kind.Kind {
	for k, vs := range optionVariants {
		for _, v := range vs {
			if v == dp {
				return k
			}
		}
	}
	return kind.Kind(dp)
}

// shortName names a datapath in lab names: short's entry, or the first
// three letters of a kind short lacks.
func shortName(dp string) string {
	if s, ok := short[dp]; ok {
		return s
	}
	return dp[:min(3, len(dp))]
}
