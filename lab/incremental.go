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

// tableChangeApplier is changeApplier's twin for a service proxy: a
// change from the table last applied to a new one (datapath/ebpf's
// proxy).
type tableChangeApplier interface {
	ApplyChange(ctx context.Context, lab *topology.Spec, from, to *service.Table) error
}

// lastSet remembers, per lab, what this process last applied successfully:
// the start of the next change. A new process has none, and its first
// apply is a whole one.
type lastSet[T any] struct {
	mu sync.Mutex
	by map[string]T
}

var (
	lastApplied lastSet[*policy.Compiled] // policies
	lastTable   lastSet[*service.Table]   // Services
)

func (l *lastSet[T]) get(name string) (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.by[name]
	return v, ok
}

func (l *lastSet[T]) set(name string, v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string]T{}
	}
	l.by[name] = v
}

func (l *lastSet[T]) forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.by, name)
}

// apply runs change from what the lab last had when there is one (and
// the implementation can: change is nil otherwise), else whole, and
// remembers to on success; a failure forgets, so the next apply is whole.
func (l *lastSet[T]) apply(name string, to T, whole func() error, change func(from T) error) error {
	var err error
	if from, ok := l.get(name); ok && change != nil {
		err = change(from)
	} else {
		err = whole()
	}
	if err != nil {
		l.forget(name)
		return err
	}
	l.set(name, to)
	return nil
}

// applyCompiled has the datapath enforce c: as a change from the set this
// process last applied to the lab when the datapath can, else whole.
func applyCompiled(ctx context.Context, spec *topology.Spec, dp datapath.Datapath, c *policy.Compiled) error {
	var change func(from *policy.Compiled) error
	if ca, ok := dp.(changeApplier); ok {
		change = func(from *policy.Compiled) error { return ca.ApplyChange(ctx, spec, from, c) }
	}
	return lastApplied.apply(spec.Name, c, func() error { return dp.Apply(ctx, spec, c) }, change)
}

// applyTable has the proxy serve t: as a change from the table this
// process last applied to the lab when the proxy can, else whole.
func applyTable(ctx context.Context, spec *topology.Spec, px proxy.Proxy, t *service.Table) error {
	var change func(from *service.Table) error
	if ca, ok := px.(tableChangeApplier); ok {
		change = func(from *service.Table) error { return ca.ApplyChange(ctx, spec, from, t) }
	}
	return lastTable.apply(spec.Name, t, func() error { return px.Apply(ctx, spec, t) }, change)
}

// forgetTable drops what this process remembers of a lab's Services (a
// repair applied another table).
func forgetTable(name string) { lastTable.forget(name) }

// forget drops everything this process remembers of a lab (it went
// down): a lab of the same name brought up again starts whole.
func forget(name string) {
	lastTable.forget(name)
	lastApplied.forget(name)
}
