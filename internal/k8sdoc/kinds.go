package k8sdoc

import "strings"

// Kind is one apiVersion and kind of document cnlab reads.
type Kind struct {
	APIVersion string
	Kind       string
}

// Family is the kinds one cnlab command applies.
type Family struct {
	// Command applies the family's documents: "cnlab policy apply".
	Command string
	// Noun names the family's documents in "no policy documents".
	Noun  string
	Kinds []Kind
}

// The families, one entry per kind: adding a kind is a line here and its
// decoder in the family's reader (NewReader refuses a family and a table
// that disagree).
var (
	Policies = Family{Command: "cnlab policy apply", Noun: "policy", Kinds: []Kind{
		{"networking.k8s.io/v1", "NetworkPolicy"},
		{"cilium.io/v2", "CiliumNetworkPolicy"},
		{"policy.networking.k8s.io/v1alpha2", "ClusterNetworkPolicy"},
		{"policy.networking.k8s.io/v1alpha1", "AdminNetworkPolicy"},
		{"policy.networking.k8s.io/v1alpha1", "BaselineAdminNetworkPolicy"},
	}}
	Services = Family{Command: "cnlab service apply", Noun: "Service or EndpointSlice", Kinds: []Kind{
		{"v1", "Service"},
		{"discovery.k8s.io/v1", "EndpointSlice"},
	}}
)

// Families lists every family cnlab reads.
func Families() []*Family { return []*Family{&Policies, &Services} }

// Lookup returns the kind named kind, if the family has it.
func (f *Family) Lookup(kind string) (Kind, bool) {
	for _, k := range f.Kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return Kind{}, false
}

// Names lists the family's kinds, in its order.
func (f *Family) Names() []string {
	out := make([]string, len(f.Kinds))
	for i, k := range f.Kinds {
		out[i] = k.Kind
	}
	return out
}

// oneOf spells the kinds as alternatives: "A or B", "A, B or C".
func (f *Family) oneOf() string {
	n := f.Names()
	if len(n) < 2 {
		return strings.Join(n, "")
	}
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}

// applier returns the family, other than f, that has kind.
func (f *Family) applier(kind string) *Family {
	for _, o := range Families() {
		if o.Command == f.Command {
			continue
		}
		if _, ok := o.Lookup(kind); ok {
			return o
		}
	}
	return nil
}
