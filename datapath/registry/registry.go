// Package registry lists the datapath implementations of this build, one
// descriptor each, and is the one place that constructs a datapath from
// its kind. The list is explicit (no init-time registration): a program
// that imports this package has every datapath, and a test checks that
// every kind of datapath/kind has exactly one implementation here.
package registry

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/datapath/iptables"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/nftables"
)

// descriptors returns the implementations, in kind.All's order.
func descriptors() []datapath.Descriptor {
	return []datapath.Descriptor{iptables.Descriptor, nftables.Descriptor, ebpf.Descriptor}
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
