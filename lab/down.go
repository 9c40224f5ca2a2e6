package lab

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/topology"
)

// Down removes a lab, under its lock: its namespaces (with the processes
// inside, and every link, bridge, route, rule and program), what its
// datapath keeps outside them (eBPF pins), and its ledger. It finds what
// to delete from the kernel's state, not from the ledger, so a lab left
// half-built by a crash is removed as well. A lab of which nothing is left
// is a NotFoundError.
func Down(lab string, progress topology.Progress) error {
	unlock, err := lockLab(lab)
	if err != nil {
		return err
	}
	defer unlock()
	names, err := topology.Netns(lab)
	if err != nil {
		return err
	}
	if _, serr := os.Stat(labDir(lab)); len(names) == 0 && serr != nil && !slices.Contains(registry.Labs(), lab) {
		return &topology.NotFoundError{What: "lab", Name: lab}
	}
	return teardown(lab, progress)
}

// DownAll removes every cnlab lab on the machine and returns the names of
// those it removed.
func DownAll(progress topology.Progress) ([]string, error) {
	labs, err := Labs()
	if err != nil {
		return nil, err
	}
	return DownEach(labs, progress)
}

// DownEach takes the labs down one after the other, as DownAll does, and
// returns those it took down; a lab already gone is skipped.
func DownEach(labs []string, progress topology.Progress) ([]string, error) {
	var errs []error
	var done []string
	for _, lab := range labs {
		err := Down(lab, progress)
		var nf *topology.NotFoundError
		switch {
		case err == nil:
			done = append(done, lab)
		case !errors.As(err, &nf):
			errs = append(errs, fmt.Errorf("down %s: %w", lab, err))
		}
	}
	return done, errors.Join(errs...)
}

// teardown does the work of Down without taking the lock. The namespaces
// go first: deleting them detaches every program and removes every rule
// inside, so the datapaths' own cleanup only has what lives outside them
// (pins) left to remove, and the ledger goes last so that a failure leaves
// the lab visible to status and down.
func teardown(lab string, progress topology.Progress) error {
	forget(lab)
	if err := topology.Teardown(lab, progress); err != nil {
		return err
	}
	if err := registry.Cleanup(lab); err != nil {
		return err
	}
	return removeState(lab)
}
