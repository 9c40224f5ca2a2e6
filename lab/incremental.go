package lab

import (
	"context"
	"sync"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// changeApplier is a datapath that can apply a change from the compiled
// policies last applied to new ones, from what changed rather than from
// the whole set (datapath/ebpf). It checks against the hosts' own files
// that they enforce from, and applies the whole set otherwise.
type changeApplier interface {
	ApplyChange(ctx context.Context, lab *topology.Spec, from, to *policy.Compiled) error
}

// lastApplied is, per lab, the compiled set this process last applied
// successfully: the start of the next change. A new process has none,
// and its first apply is a whole one.
var lastApplied struct {
	sync.Mutex
	by map[string]*policy.Compiled
}

// applyCompiled has the datapath enforce c: as a change from the set this
// process last applied to the lab when the datapath can, else whole.
func applyCompiled(ctx context.Context, spec *topology.Spec, dp datapath.Datapath, c *policy.Compiled) error {
	lastApplied.Lock()
	from := lastApplied.by[spec.Name]
	lastApplied.Unlock()
	var err error
	if ca, ok := dp.(changeApplier); ok && from != nil {
		err = ca.ApplyChange(ctx, spec, from, c)
	} else {
		err = dp.Apply(ctx, spec, c)
	}
	lastApplied.Lock()
	defer lastApplied.Unlock()
	if lastApplied.by == nil {
		lastApplied.by = map[string]*policy.Compiled{}
	}
	if err == nil {
		lastApplied.by[spec.Name] = c
	} else {
		delete(lastApplied.by, spec.Name)
	}
	return err
}
