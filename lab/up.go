package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

// ErrAlreadyUp is returned by Up when the lab already exists.
var ErrAlreadyUp = errors.New("lab is already up")

// AlreadyUpError says `up` found the lab already present and changed
// nothing. Complete is false for a lab left half-built by an interrupted
// `up`; SameSpec tells whether the running lab matches the requested one.
type AlreadyUpError struct {
	Lab      string
	Complete bool
	SameSpec bool
	Diff     string // what differs, when !SameSpec
	// ObserveOnly: the running lab differs from the requested one in its
	// observe level only (SetObserve changes that).
	ObserveOnly bool
}

func (e *AlreadyUpError) Error() string {
	switch {
	case !e.Complete:
		return fmt.Sprintf("lab %s exists but is incomplete or orphaned (an interrupted up?); nothing changed: run `cnlab down %s` first", e.Lab, e.Lab)
	case !e.SameSpec:
		return fmt.Sprintf("lab %s is already up with %s; nothing changed: run `cnlab down %s` first, or choose another name (--name)", e.Lab, e.Diff, e.Lab)
	}
	return fmt.Sprintf("lab %s is already up; nothing changed", e.Lab)
}

func (e *AlreadyUpError) Is(target error) bool { return target == ErrAlreadyUp }

// UpOptions tunes Up.
type UpOptions struct {
	Progress topology.Progress
	Workers  int // endpoints built in parallel (default 4)
}

// Up brings a lab up, under its lock: it records the lab in its ledger,
// builds it in the kernel, sets its datapath up and makes it enforce no
// policy (everything allowed). A datapath this machine cannot run is
// refused before anything is built. If anything fails (or ctx is
// cancelled) it tears down what it built before returning the error.
func Up(ctx context.Context, spec *topology.Spec, o UpOptions) error {
	var dp datapath.Datapath
	if spec.Datapath != kind.None {
		var err error
		if dp, err = registry.New(spec.Datapath); err != nil {
			return &input.Error{File: spec.Source, Path: "datapath", Msg: err.Error()}
		}
	}
	unlock, err := lockLab(spec.Name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := checkAbsent(spec); err != nil {
		return err
	}
	if why := spec.Datapath.Missing(&spec.Options); why != "" {
		return fmt.Errorf("datapath %s: this machine cannot run it: %s", spec.Datapath, why)
	}
	if spec.Chain != nil && spec.Chain.Link == topology.ChainOVS {
		if err := topology.CheckOVS(); err != nil {
			return fmt.Errorf("chain link %s: %w", topology.ChainOVS, err)
		}
	}
	st := &State{Schema: 1, Phase: PhaseCreating, Created: time.Now().UTC(), Pid: os.Getpid(), Spec: spec}
	if err := writeState(st); err != nil {
		return err
	}
	err = topology.Build(ctx, spec, topology.BuildOptions{Progress: o.Progress, Workers: o.Workers})
	if err == nil && dp != nil {
		err = setupDatapath(ctx, spec, dp)
	}
	if err == nil {
		st.Phase = PhaseUp
		err = writeState(st)
	}
	if err == nil && spec.ObserveLevel() != topology.ObserveOff {
		err = startRecorder(spec)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			err = errors.New("interrupted")
		}
		if derr := teardown(spec.Name, o.Progress); derr != nil {
			return fmt.Errorf("up %s: %w; cleaning up also failed: %w", spec.Name, err, derr)
		}
		return fmt.Errorf("up %s: %w (nothing was left behind)", spec.Name, err)
	}
	return nil
}

// setupDatapath prepares every host of a freshly built lab and makes it
// enforce no policy (everything allowed).
func setupDatapath(ctx context.Context, spec *topology.Spec, dp datapath.Datapath) error {
	err := dp.Setup(ctx, spec)
	if err == nil {
		_, err = applyLocked(ctx, spec, dp, nil)
	}
	if err != nil {
		return fmt.Errorf("set up datapath %s: %w", spec.Datapath, err)
	}
	return nil
}

// checkAbsent refuses to build over an existing lab.
func checkAbsent(spec *topology.Spec) error {
	names, err := topology.Netns(spec.Name)
	if err != nil {
		return err
	}
	st, serr := ReadState(spec.Name)
	if len(names) == 0 && serr != nil {
		return nil
	}
	e := &AlreadyUpError{Lab: spec.Name}
	if serr == nil && st.Phase == PhaseUp {
		e.Complete = true
		for _, n := range st.Spec.Netns() {
			if !netns.Exists(n) {
				e.Complete = false
			}
		}
		e.SameSpec = topology.Same(st.Spec, spec)
		if !e.SameSpec {
			x := *st.Spec
			x.Observe = spec.Observe
			e.ObserveOnly = topology.Same(&x, spec)
		}
		e.Diff = topology.DescribeDiff(st.Spec, spec, 3)
	}
	return e
}
