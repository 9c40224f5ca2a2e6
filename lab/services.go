package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/proxy"
	proxyregistry "github.com/cnlab/cnlab/proxy/registry"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// A lab's Services are stored as the documents applied (services.yaml,
// Services then EndpointSlices, each as written) beside the addresses and
// node ports allocated to them (services-alloc.json), so that a Service
// keeps its cluster IP from one apply to the next.

func servicesPath(lab string) string { return filepath.Join(labDir(lab), "services.yaml") }
func allocPath(lab string) string    { return filepath.Join(labDir(lab), "services-alloc.json") }

// serviceStore is where a lab's Services are stored and a Service change
// records (services-change.json) and stages itself, as a policy change
// does: the documents first, then the allocations, each staged beside
// itself and committed by a rename.
func serviceStore(lab string) change.Store {
	return change.Store{What: "services", Record: filepath.Join(labDir(lab), "services-change.json"),
		Files: []string{servicesPath(lab), allocPath(lab)}}
}

// ErrNoProxy is returned for a Service change on a lab without a service
// proxy.
var ErrNoProxy = errors.New("has no service proxy")

// StoredServices returns the Services and EndpointSlices applied to a lab.
func StoredServices(lab string) ([]*service.Service, []*service.Slice, error) {
	return readServices(serviceStore(lab).Path(0))
}

// readServices reads a file of Services and EndpointSlices (the stored
// one, or a staged one).
func readServices(path string) ([]*service.Service, []*service.Slice, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && strings.TrimSpace(string(data)) == "") {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	svcs, sls, err := service.Parse(data, path)
	if err != nil {
		return nil, nil, fmt.Errorf("stored services of lab %s: %w", filepath.Base(filepath.Dir(path)), err)
	}
	return svcs, sls, nil
}

func readAlloc(lab string) (*service.Allocations, error) {
	return readAllocFile(lab, serviceStore(lab).Path(1))
}

func readAllocFile(lab, path string) (*service.Allocations, error) {
	var a service.Allocations
	if err := files.ReadJSON(path, &a); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("stored service addresses of lab %s: %w", lab, err)
	}
	return &a, nil
}

// ServiceChange is what a service apply or delete did.
type ServiceChange struct {
	Created, Updated, Deleted, Unchanged []string
	Resolved                             *service.Resolved
}

// upsert adds or replaces the items of add in cur by ref, recording what
// changed.
func upsert[T any](cur, add []T, ref func(T) string, raw func(T) string, ch *ServiceChange) []T {
	out := slices.Clone(cur)
	idx := map[string]int{}
	for i, x := range out {
		idx[ref(x)] = i
	}
	for _, x := range add {
		if i, ok := idx[ref(x)]; ok {
			if raw(out[i]) == raw(x) {
				ch.Unchanged = append(ch.Unchanged, ref(x))
			} else {
				ch.Updated = append(ch.Updated, ref(x))
			}
			out[i] = x
			continue
		}
		idx[ref(x)] = len(out)
		out = append(out, x)
		ch.Created = append(ch.Created, ref(x))
	}
	return out
}

// ApplyServices adds or replaces Services and EndpointSlices (matched by
// kind, namespace and name) and makes the lab's proxy serve the new set.
// Nothing is stored unless every host took it.
func ApplyServices(ctx context.Context, labName string, svcs []*service.Service, sls []*service.Slice) (*ServiceChange, error) {
	return modifyServices(ctx, labName, "apply", func(cs []*service.Service, cl []*service.Slice, ch *ServiceChange) ([]*service.Service, []*service.Slice, error) {
		return upsert(cs, svcs, (*service.Service).Ref, func(s *service.Service) string { return s.Raw }, ch),
			upsert(cl, sls, (*service.Slice).Ref, func(s *service.Slice) string { return s.Raw }, ch), nil
	})
}

// ReplaceServices makes svcs and sls the lab's whole set of Services and
// EndpointSlices (the experiments' sweep of the number of Services), in
// one change of each host's proxy. The change it returns has Resolved
// only (no per-document account).
func ReplaceServices(ctx context.Context, labName string, svcs []*service.Service, sls []*service.Slice) (*ServiceChange, error) {
	return modifyServices(ctx, labName, "replace", func([]*service.Service, []*service.Slice, *ServiceChange) ([]*service.Service, []*service.Slice, error) {
		return svcs, sls, nil
	})
}

// DeleteServices removes Services by "namespace/name" (or "name" in
// namespace default) with the EndpointSlices that name them, or
// everything.
func DeleteServices(ctx context.Context, labName string, names []string, all bool) (*ServiceChange, error) {
	return modifyServices(ctx, labName, "delete", func(cs []*service.Service, cl []*service.Slice, ch *ServiceChange) ([]*service.Service, []*service.Slice, error) {
		drop := map[string]bool{}
		for _, n := range names {
			if !strings.Contains(n, "/") {
				n = topology.DefaultNamespace + "/" + n
			}
			found := slices.ContainsFunc(cs, func(s *service.Service) bool { return s.Key() == n })
			if !found {
				var have []string
				for _, s := range cs {
					have = append(have, s.Key())
				}
				err := error(&topology.NotFoundError{What: "service", Name: n, Lab: labName})
				if len(have) > 0 {
					err = fmt.Errorf("%w (services: %s)", err, strings.Join(have, ", "))
				}
				return nil, nil, err
			}
			drop[n] = true
		}
		var os []*service.Service
		for _, s := range cs {
			if all || drop[s.Key()] {
				ch.Deleted = append(ch.Deleted, s.Ref())
			} else {
				os = append(os, s)
			}
		}
		var ol []*service.Slice
		for _, s := range cl {
			if all || drop[s.ServiceKey()] {
				ch.Deleted = append(ch.Deleted, s.Ref())
			} else {
				ol = append(ol, s)
			}
		}
		return os, ol, nil
	})
}

// modifyServices runs f on the lab's stored documents under the lab's
// lock, resolves the result (a bad set writes nothing), and changes the
// lab as a policy change does (modify): the change is recorded and its
// set staged, the proxy applies it on every host (each host in one atomic
// transaction, marked dirty until its state is saved), then the staged set
// is committed and the record removed. Killed at any point, the store
// holds the set from before or after the change and the next change
// repairs every host; failed, the hosts are left on the stored set.
func modifyServices(ctx context.Context, labName, op string, f func([]*service.Service, []*service.Slice, *ServiceChange) ([]*service.Service, []*service.Slice, error)) (*ServiceChange, error) {
	unlock, err := lockLab(labName)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := fault.At(fault.Locked, ""); err != nil {
		return nil, err
	}
	return modifyServicesLocked(ctx, labName, op, f)
}

// modifyServicesLocked is modifyServices with the lab's lock held.
func modifyServicesLocked(ctx context.Context, labName, op string, f func([]*service.Service, []*service.Slice, *ServiceChange) ([]*service.Service, []*service.Slice, error)) (*ServiceChange, error) {
	spec, px, err := openProxy(labName)
	if err != nil {
		return nil, err
	}
	store := serviceStore(labName)
	// A commit killed between its two renames is finished first.
	if err := store.Repair(); err != nil {
		return nil, err
	}
	svcs, sls, err := StoredServices(labName)
	if err != nil {
		return nil, err
	}
	alloc, err := readAlloc(labName)
	if err != nil {
		return nil, err
	}
	ch := &ServiceChange{}
	nsvcs, nsls, err := f(svcs, sls, ch)
	if err != nil {
		return nil, err
	}
	if ch.Resolved, err = service.Resolve(spec, nsvcs, nsls, alloc); err != nil {
		return nil, err
	}
	if err := proxyregistry.CheckFamilies(spec.Services.Proxy, ch.Resolved.Table); err != nil {
		return nil, err
	}
	allocs, err := json.Marshal(ch.Resolved.Allocations)
	if err != nil {
		return nil, err
	}
	// Set up on first use: a lab that serves no Service has no proxy
	// chains, hairpin ports or NAT hooks in its way.
	if err := px.Setup(ctx, spec); err != nil {
		return nil, fmt.Errorf("service proxy %s: %w", spec.Services.Proxy, err)
	}
	// The record's From stays empty: the digest of the stored set would
	// cost resolving it, as much as the change itself.
	rec := &change.Record{Op: op, Pid: os.Getpid(), Started: time.Now().UTC(), To: proxy.Digest(ch.Resolved.Table),
		Created: ch.Created, Updated: ch.Updated, Deleted: ch.Deleted}
	if err := store.Begin(rec, service.Encode(nsvcs, nsls), allocs); err != nil {
		return nil, abortServices(ctx, spec, px, err)
	}
	if err := fault.At(fault.Staged, ""); err != nil {
		return nil, abortServices(ctx, spec, px, err)
	}
	if err := applyTable(ctx, spec, px, ch.Resolved.Table); err != nil {
		return nil, abortServices(ctx, spec, px, fmt.Errorf("service proxy %s: %w", spec.Services.Proxy, err))
	}
	_ = fault.At(fault.Applied, "")
	if err := store.Commit(); err != nil {
		return nil, abortServices(ctx, spec, px, err)
	}
	_ = fault.At(fault.Committed, "")
	// A record that cannot be removed only makes status report this
	// change as killed after its commit, which it tells apart.
	_ = store.End()
	return ch, nil
}

// abortServices ends a Service change that failed after it was staged, as
// abort does a policy change: the proxy put back the hosts it could; hosts
// it rebuilt keep the new set and hosts whose state could not be saved
// stay dirty, so the stored set is applied again to every host whose files
// do not say it serves it. Then the staged set and the record go.
func abortServices(ctx context.Context, spec *topology.Spec, px proxy.Proxy, cause error) error {
	err := cause
	sk, _ := proxyregistry.StateKind(spec.Services.Proxy)
	r, _, _, rerr := resolveStored(spec)
	switch {
	case rerr != nil:
		err = fmt.Errorf("%w; the stored Services cannot be read: %w", cause, rerr)
	default:
		if off := offStored(spec, sk, proxy.Digest(r.Table)); len(off) > 0 {
			hosts := strings.Join(off, ", ")
			forgetTable(spec.Name)
			if aerr := px.Apply(context.WithoutCancel(ctx), spec, r.Table); aerr != nil {
				err = fmt.Errorf("%w; host(s) %s were left off the stored Services, and applying them again failed too: %w (the next change rebuilds them)", cause, hosts, aerr)
			} else {
				err = fmt.Errorf("%w (host(s) %s were given the stored Services again)", cause, hosts)
			}
		}
	}
	if cerr := serviceStore(spec.Name).End(); cerr != nil {
		err = fmt.Errorf("%w; removing the staged Services failed: %w", err, cerr)
	}
	return err
}

// ResolvedServices returns a lab's spec and its Services as resolved now
// (the lab's endpoints may have changed since they were applied: never).
func ResolvedServices(labName string) (*topology.Spec, *service.Resolved, error) {
	spec, err := Open(labName)
	if err != nil {
		return nil, nil, err
	}
	r, _, _, err := resolveStored(spec)
	return spec, r, err
}

// resolveStored resolves a lab's stored Services and EndpointSlices, and
// says how many of each are stored (0 when they cannot be read).
func resolveStored(spec *topology.Spec) (r *service.Resolved, nsvcs, nslices int, err error) {
	svcs, sls, err := StoredServices(spec.Name)
	if err != nil {
		return nil, 0, 0, err
	}
	alloc, err := readAlloc(spec.Name)
	if err == nil {
		r, err = service.Resolve(spec, svcs, sls, alloc)
	}
	return r, len(svcs), len(sls), err
}

// DescribeServices returns the proxy's kernel state per host.
func DescribeServices(ctx context.Context, labName string) (map[string]string, error) {
	spec, px, err := openProxy(labName)
	if err != nil {
		return nil, err
	}
	return px.Describe(ctx, spec)
}

// openProxy returns a running lab's spec and its service proxy.
func openProxy(labName string) (*topology.Spec, proxy.Proxy, error) {
	spec, err := Open(labName)
	if err != nil {
		return nil, nil, err
	}
	p := spec.Services.Proxy
	if p == "" || p == kind.ProxyNone {
		return nil, nil, fmt.Errorf("lab %s %w (bring it up with --service-proxy %s, or services: {proxy: ...} in its file)",
			labName, ErrNoProxy, kind.ProxyChoices())
	}
	for _, tool := range p.Tools(&spec.Options) {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, nil, fmt.Errorf("service proxy %s: %s is not installed", p, tool)
		}
	}
	px, err := proxyregistry.New(p)
	if err != nil {
		return nil, nil, err
	}
	return spec, px, nil
}

// ServiceModel returns the oracle of a lab's Services: what it resolves
// to now, judged with the lab's stored policies.
func ServiceModel(labName string) (*service.Model, error) {
	spec, r, err := ResolvedServices(labName)
	if err != nil {
		return nil, err
	}
	_, pm, err := Model(labName, false)
	if err != nil {
		return nil, err
	}
	return &service.Model{Lab: spec, Resolved: r, Policy: pm}, nil
}

// ServicesStatus is what a lab's files say of its Services: how many are
// stored, a change that is running or was killed (as PolicyStatus says of
// policies), and which set each host's proxy serves.
type ServicesStatus struct {
	Services int               `json:"stored"`
	Slices   int               `json:"storedSlices"`
	Staged   *StagedServices   `json:"staged,omitempty"`
	Change   *ChangeStatus     `json:"change,omitempty"`
	Hosts    []ProxyHostStatus `json:"proxyHosts,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// StagedServices is a set of Services written beside the stored one and
// not committed.
type StagedServices struct {
	Services int    `json:"services"`
	Slices   int    `json:"slices"`
	Set      string `json:"set"` // proxy.Digest; "" when it cannot be read
}

// ProxyHostStatus is one host's proxy as its state files describe it.
type ProxyHostStatus struct {
	Name string `json:"name"`
	// Dirty: a change was interrupted on the host (or runs now); the next
	// apply rebuilds it.
	Dirty bool `json:"dirty,omitempty"`
	// InSync: the host serves the stored set (a host that never served a
	// Service is in sync while none is stored).
	InSync bool `json:"inSync"`
	// Holds lists the sets its kernel may hold (HoldsStored, HoldsStaged,
	// HoldsOther, HoldsUnknown), as HostSet.Holds.
	Holds []string `json:"holds,omitempty"`
}

// Troubled reports whether a Service change is left unfinished or a host
// may not serve the stored set.
func (s *ServicesStatus) Troubled() bool {
	if s.Change != nil || s.Staged != nil || s.Error != "" {
		return true
	}
	for _, h := range s.Hosts {
		if h.Dirty || !h.InSync {
			return true
		}
	}
	return false
}

// ServicesState reads what a lab's files say of its Services; nil for a
// lab without a service proxy.
func ServicesState(spec *topology.Spec) *ServicesStatus {
	if spec == nil || len(spec.Hosts) == 0 {
		return nil
	}
	sk, ok := proxyregistry.StateKind(spec.Services.Proxy)
	if !ok {
		return nil
	}
	st := &ServicesStatus{}
	r, nsvcs, nslices, err := resolveStored(spec)
	st.Services, st.Slices = nsvcs, nslices
	var set string
	if err != nil {
		st.Error = err.Error()
	} else {
		set = proxy.Digest(r.Table)
	}
	store := serviceStore(spec.Name)
	staged := ""
	if _, err := os.Stat(store.Staged(0)); err == nil {
		st.Staged = &StagedServices{}
		svcs, sls, err := readServices(store.Staged(0))
		alloc, aerr := readAllocFile(spec.Name, store.Staged(1))
		if err == nil && aerr == nil {
			if r, err := service.Resolve(spec, svcs, sls, alloc); err == nil {
				staged = proxy.Digest(r.Table)
				st.Staged.Services, st.Staged.Slices, st.Staged.Set = len(svcs), len(sls), staged
			}
		}
	}
	st.Change = changeStatus(spec.Name, store, set)
	for i, hs := range hostSets(spec, sk, set, staged) {
		path := change.StatePath(spec.Name, sk, hs.Name)
		_, statErr := os.Stat(path)
		never := errors.Is(statErr, os.ErrNotExist) && !hs.Dirty
		inSync := !hs.Dirty && set != "" && (!hs.OffStored() || never && nsvcs+nslices == 0)
		if never || inSync {
			hs.Holds = nil // status -o json is as before unless something is off
		}
		st.Hosts = append(st.Hosts, ProxyHostStatus{Name: spec.Hosts[i].Name, Dirty: hs.Dirty, InSync: inSync, Holds: hs.Holds})
	}
	return st
}
