package lab

import (
	"context"
	"sync"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/proxy"
	"github.com/cnlab/cnlab/service"
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

// tableChangeApplier is a service proxy that can apply a change from the
// table it last applied to a new one, from what changed rather than from
// the whole table. Like changeApplier, it checks against the hosts' own
// files that they serve from, and applies the whole table otherwise.
type tableChangeApplier interface {
	ApplyChange(ctx context.Context, lab *topology.Spec, from, to *service.Table) error
}

// lastTable is, per lab, the Service table this process last applied
// successfully (lastApplied's twin for Services).
var lastTable struct {
	sync.Mutex
	by map[string]*service.Table
}

// applyTable has the proxy serve t: as a change from the table this
// process last applied to the lab when the proxy can, else whole.
func applyTable(ctx context.Context, spec *topology.Spec, px proxy.Proxy, t *service.Table) error {
	lastTable.Lock()
	from := lastTable.by[spec.Name]
	lastTable.Unlock()
	var err error
	if ca, ok := px.(tableChangeApplier); ok && from != nil {
		err = ca.ApplyChange(ctx, spec, from, t)
	} else {
		err = px.Apply(ctx, spec, t)
	}
	lastTable.Lock()
	defer lastTable.Unlock()
	if lastTable.by == nil {
		lastTable.by = map[string]*service.Table{}
	}
	if err == nil {
		lastTable.by[spec.Name] = t
	} else {
		delete(lastTable.by, spec.Name)
	}
	return err
}

// forgetTable drops what this process remembers of a lab's Services (a
// repair applied another table).
func forgetTable(name string) {
	lastTable.Lock()
	defer lastTable.Unlock()
	delete(lastTable.by, name)
}

// forget drops everything this process remembers of a lab (it went
// down): a lab of the same name brought up again starts whole.
func forget(name string) {
	forgetTable(name)
	lastApplied.Lock()
	defer lastApplied.Unlock()
	delete(lastApplied.by, name)
}
