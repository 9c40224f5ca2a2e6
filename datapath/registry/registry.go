// Package registry lists the datapath implementations of this build, one
// descriptor each, and is the one place that constructs a datapath from
// its kind. The list is explicit (no init-time registration): a program
// that imports this package has every datapath, and a test checks that
// every kind of datapath/kind has exactly one implementation here. A
// datapath that is not built in (a test's stand-in) is added with
// Register, its kind and its implementation together.
package registry

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/datapath/iptables"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/nftables"
)

// builtin are the implementations of the built-in kinds, in kind.All's
// order.
func builtin() []datapath.Descriptor {
	return []datapath.Descriptor{iptables.Descriptor, nftables.Descriptor, ebpf.Descriptor}
}

// registered are the implementations added with Register.
var registered struct {
	sync.Mutex
	impls []datapath.Descriptor
}

// descriptors returns the implementations, in kind.All's order.
func descriptors() []datapath.Descriptor {
	registered.Lock()
	defer registered.Unlock()
	return append(builtin(), registered.impls...)
}

// Register adds a datapath that is not built in — a test's stand-in —
// declared once: k says what its kind is (kind.Register), d binds it to its
// implementation. It returns the function that removes both. Everything
// that lists the datapaths (kind.All, messages, the tests that iterate
// them) sees it until then.
func Register(k kind.Descriptor, d datapath.Descriptor) (remove func(), err error) {
	if d.Kind != k.Kind || d.New == nil {
		return nil, fmt.Errorf("register datapath %q: its implementation is for %q or has no constructor", k.Kind, d.Kind)
	}
	if (d.Labs == nil) != (d.Cleanup == nil) {
		return nil, fmt.Errorf("register datapath %q: Labs and Cleanup must come together", k.Kind)
	}
	removeKind, err := kind.Register(k)
	if err != nil {
		return nil, err
	}
	registered.Lock()
	defer registered.Unlock()
	registered.impls = append(registered.impls, d)
	return func() {
		registered.Lock()
		registered.impls = slices.DeleteFunc(registered.impls, func(x datapath.Descriptor) bool { return x.Kind == k.Kind })
		registered.Unlock()
		removeKind()
	}, nil
}

// New returns a datapath of kind k.
func New(k kind.Kind) (datapath.Datapath, error) {
	for _, d := range descriptors() {
		if d.Kind == k {
			return d.New(), nil
		}
	}
	if k == kind.None {
		return nil, datapath.ErrNoHosts
	}
	return nil, fmt.Errorf("unknown datapath %q (supported: %s)", k, kind.Names())
}

// Labs lists the labs that have datapath state outside their namespaces
// (eBPF pins), sorted.
func Labs() []string {
	set := map[string]bool{}
	for _, d := range descriptors() {
		if d.Labs != nil {
			for _, l := range d.Labs() {
				set[l] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// Cleanup removes what every datapath keeps outside a lab's namespaces.
func Cleanup(lab string) error {
	var errs []error
	for _, d := range descriptors() {
		if d.Cleanup != nil {
			if err := d.Cleanup(lab); err != nil {
				errs = append(errs, fmt.Errorf("%s datapath: %w", d.Kind, err))
			}
		}
	}
	return errors.Join(errs...)
}
