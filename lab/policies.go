package lab

import (
	"context"
	"errors"
	"fmt"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/l7proxy/deploy"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

func policiesPath(lab string) string { return filepath.Join(labDir(lab), "policies.yaml") }

// Policies returns the policies applied to a lab, in the order applied.
func Policies(lab string) ([]*policy.Policy, error) {
	data, err := os.ReadFile(policiesPath(lab))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(string(data)) == "" {
		return nil, nil
	}
	pols, err := policy.Parse(data, policiesPath(lab))
	if err != nil {
		return nil, fmt.Errorf("stored policies of lab %s: %w", lab, err)
	}
	return pols, nil
}

func key(p *policy.Policy) string { return p.Kind + " " + p.Key() }

// Change is what an apply or delete did.
type Change struct {
	Created, Updated, Deleted, Unchanged []string
	Compiled                             *policy.Compiled
}

// Apply adds or replaces policies (matched by kind, namespace and name)
// and makes the datapath enforce the new set. Nothing is stored unless the
// datapath took it.
func Apply(ctx context.Context, labName string, pols []*policy.Policy) (*Change, error) {
	return modify(ctx, labName, "apply", false, applyTo(pols))
}

// Plan is what an apply would do, worked out without changing anything:
// the change (Change.Compiled is the set that would be enforced), the
// set enforced now and the lab it is for.
type Plan struct {
	Change *Change
	Before *policy.Compiled
	Spec   *topology.Spec
}

// PlanApply is Apply without its effects (policy apply --dry-run): it
// compiles the lab's policies with pols added or replaced, and the
// stored ones, and touches neither the kernel nor the stored set.
func PlanApply(labName string, pols []*policy.Policy) (*Plan, error) {
	spec, _, err := openDatapath(labName)
	if err != nil {
		return nil, err
	}
	cur, err := Policies(labName)
	if err != nil {
		return nil, err
	}
	pl := &Plan{Change: &Change{}, Spec: spec}
	next, err := applyTo(pols)(cur, pl.Change)
	if err != nil {
		return nil, err
	}
	if pl.Change.Compiled, err = compile(spec, next); err != nil {
		return nil, err
	}
	if pl.Before, err = compile(spec, cur); err != nil {
		return nil, err
	}
	return pl, nil
}

// applyTo is Apply's change: pols added to the set, or replacing the
// policies of their kind, namespace and name.
func applyTo(pols []*policy.Policy) func([]*policy.Policy, *Change) ([]*policy.Policy, error) {
	return func(cur []*policy.Policy, ch *Change) ([]*policy.Policy, error) {
		idx := map[string]int{}
		for i, p := range cur {
			idx[key(p)] = i
		}
		out := append([]*policy.Policy(nil), cur...)
		for _, p := range pols {
			if i, ok := idx[key(p)]; ok {
				if out[i].Raw == p.Raw {
					ch.Unchanged = append(ch.Unchanged, p.Ref())
				} else {
					ch.Updated = append(ch.Updated, p.Ref())
				}
				out[i] = p
				continue
			}
			idx[key(p)] = len(out)
			out = append(out, p)
			ch.Created = append(ch.Created, p.Ref())
		}
		return out, nil
	}
}

// Replace makes pols the lab's whole policy set in one datapath update:
// policies not in it are deleted, the others created or updated.
func Replace(ctx context.Context, labName string, pols []*policy.Policy) (*Change, error) {
	return modify(ctx, labName, "replace", true, func(cur []*policy.Policy, ch *Change) ([]*policy.Policy, error) {
		keep := map[string]string{}
		for _, p := range pols {
			keep[key(p)] = p.Raw
		}
		had := map[string]string{}
		for _, p := range cur {
			had[key(p)] = p.Raw
			if _, ok := keep[key(p)]; !ok {
				ch.Deleted = append(ch.Deleted, p.Ref())
			}
		}
		for _, p := range pols {
			switch raw, ok := had[key(p)]; {
			case !ok:
				ch.Created = append(ch.Created, p.Ref())
			case raw == p.Raw:
				ch.Unchanged = append(ch.Unchanged, p.Ref())
			default:
				ch.Updated = append(ch.Updated, p.Ref())
			}
		}
		return pols, nil
	})
}

// Delete removes policies by "namespace/name" (or a bare name when only
// one namespace has it), or all of them. kind, when set, restricts the
// names to NetworkPolicy or CiliumNetworkPolicy; otherwise a name held by
// both kinds deletes both.
func Delete(ctx context.Context, labName string, names []string, all bool, kind string) (*Change, error) {
	return modify(ctx, labName, "delete", all, func(cur []*policy.Policy, ch *Change) ([]*policy.Policy, error) {
		if all {
			for _, p := range cur {
				ch.Deleted = append(ch.Deleted, p.Ref())
			}
			return nil, nil
		}
		drop := map[*policy.Policy]bool{}
		for _, n := range names {
			var hit []*policy.Policy
			for _, p := range cur {
				if kind != "" && p.Kind != kind {
					continue
				}
				if p.Key() == n || (!strings.Contains(n, "/") && p.Name == n) {
					hit = append(hit, p)
				}
			}
			if len(hit) == 0 {
				var have []string
				for _, p := range cur {
					have = append(have, p.Key())
				}
				if len(have) == 0 {
					return nil, &topology.NotFoundError{What: "policy", Name: n, Lab: labName}
				}
				return nil, fmt.Errorf("%w (policies: %s)", &topology.NotFoundError{What: "policy", Name: n, Lab: labName}, strings.Join(have, ", "))
			}
			if !strings.Contains(n, "/") && len(namespacesOf(hit)) > 1 {
				return nil, &topology.AmbiguousError{What: "policy", Name: n, Lab: labName, Candidates: refsOf(hit)}
			}
			for _, p := range hit {
				drop[p] = true
			}
		}
		var out []*policy.Policy
		for _, p := range cur {
			if drop[p] {
				ch.Deleted = append(ch.Deleted, p.Ref())
			} else {
				out = append(out, p)
			}
		}
		return out, nil
	})
}

func namespacesOf(ps []*policy.Policy) map[string]bool {
	m := map[string]bool{}
	for _, p := range ps {
		m[p.Namespace] = true
	}
	return m
}

func refsOf(ps []*policy.Policy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Ref())
	}
	sort.Strings(out)
	return out
}

// modify runs f on the lab's policies and enforces the result. With
// tolerateBad, stored policies that no longer parse (written by another
// cnlab version) are dropped instead of blocking the change: delete --all
// must always be able to clean up.
//
// The change is compiled first (a bad set writes nothing), then recorded
// and its set staged beside the stored one; the datapath applies it; then
// the staged set is committed (a rename) and the record removed. Killed at
// any point, the stored set is the one before or after the change and the
// next change repairs the hosts (docs/design.md); failed, the hosts are
// left on the stored set and the staged set is removed.
func modify(ctx context.Context, labName, op string, tolerateBad bool, f func([]*policy.Policy, *Change) ([]*policy.Policy, error)) (*Change, error) {
	unlock, err := lockLab(labName)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := fault.At(fault.Locked, ""); err != nil {
		return nil, err
	}
	return modifyLocked(ctx, labName, op, tolerateBad, f)
}

// modifyLocked is modify with the lab's lock held.
func modifyLocked(ctx context.Context, labName, op string, tolerateBad bool, f func([]*policy.Policy, *Change) ([]*policy.Policy, error)) (*Change, error) {
	spec, dp, err := openDatapath(labName)
	if err != nil {
		return nil, err
	}
	cur, curErr := Policies(labName)
	if curErr != nil && !tolerateBad {
		return nil, curErr
	}
	ch := &Change{}
	next, err := f(cur, ch)
	if err != nil {
		return nil, err
	}
	if ch.Compiled, err = compile(spec, next); err != nil {
		return nil, err
	}
	rec := &change.Record{Op: op, Pid: os.Getpid(), Started: time.Now().UTC(), To: ch.Compiled.Set,
		Created: ch.Created, Updated: ch.Updated, Deleted: ch.Deleted}
	if curErr == nil {
		rec.From = policy.Digest(cur)
	}
	store := policyStore(labName)
	if err := store.Begin(rec, policy.Encode(next)); err != nil {
		return nil, abort(ctx, spec, dp, cur, curErr == nil, err)
	}
	if err := fault.At(fault.Staged, ""); err != nil {
		return nil, abort(ctx, spec, dp, cur, curErr == nil, err)
	}
	if err := enforce(ctx, spec, dp, ch.Compiled); err != nil {
		return nil, abort(ctx, spec, dp, cur, curErr == nil, err)
	}
	_ = fault.At(fault.Applied, "")
	if err := store.Commit(); err != nil {
		return nil, abort(ctx, spec, dp, cur, curErr == nil, err)
	}
	_ = fault.At(fault.Committed, "")
	// A record that cannot be removed only makes status report this
	// change as killed after its commit, which it tells apart.
	_ = store.End()
	return ch, nil
}

// compile compiles pols against the lab.
func compile(spec *topology.Spec, pols []*policy.Policy) (*policy.Compiled, error) {
	m, err := policy.NewModel(spec, pols)
	if err != nil {
		return nil, err
	}
	return m.Compile()
}

// applyLocked compiles pols against the lab, applies them, and returns
// what it compiled.
func applyLocked(ctx context.Context, spec *topology.Spec, dp datapath.Datapath, pols []*policy.Policy) (*policy.Compiled, error) {
	c, err := compile(spec, pols)
	if err != nil {
		return nil, err
	}
	return c, enforce(ctx, spec, dp, c)
}

// enforce makes the lab's hosts enforce c: the L7 proxies get their rules
// first (started where a host needs one), keeping the rules of ports that
// stop being L7 ports; then the datapath switches, redirecting what c
// sends to the proxies; then the proxies drop the rules nothing sends them
// any more. A connection is never judged by no rules, nor passed to an
// L7 port past its proxy.
func enforce(ctx context.Context, spec *topology.Spec, dp datapath.Datapath, c *policy.Compiled) error {
	started, err := deploy.Push(ctx, spec, c, true)
	if len(started) > 0 {
		if rerr := recordProxies(spec.Name, started); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return err
	}
	if err := applyCompiled(ctx, spec, dp, c); err != nil {
		return err
	}
	_, err = deploy.Push(ctx, spec, c, false)
	return err
}

// Model returns a lab's spec and the policy model of what is applied. A
// chain lab has no datapath: its model has no policy (everything allowed)
// when allowChain is set, and is ErrNoHosts otherwise.
func Model(labName string, allowChain bool) (*topology.Spec, *policy.Model, error) {
	spec, err := Open(labName)
	if err != nil {
		return nil, nil, err
	}
	if spec.Chain != nil {
		if !allowChain {
			return nil, nil, datapath.ErrNoHosts
		}
		m, err := policy.NewModel(spec, nil)
		return spec, m, err
	}
	pols, err := Policies(labName)
	if err != nil {
		return nil, nil, err
	}
	m, err := policy.NewModel(spec, pols)
	if err != nil {
		return nil, nil, err
	}
	return spec, m, nil
}

// Describe returns the datapath's kernel state.
func Describe(ctx context.Context, labName string) (map[string]string, error) {
	spec, dp, err := openDatapath(labName)
	if err != nil {
		return nil, err
	}
	return dp.Describe(ctx, spec)
}

// openDatapath returns a running lab's spec and its datapath.
func openDatapath(labName string) (*topology.Spec, datapath.Datapath, error) {
	spec, err := Open(labName)
	if err != nil {
		return nil, nil, err
	}
	if spec.Datapath == kind.None {
		return nil, nil, datapath.ErrNoHosts
	}
	dp, err := registry.New(spec.Datapath)
	if err != nil {
		return nil, nil, err
	}
	return spec, dp, nil
}

// RuleCounters returns what the lab's datapath counted per policy rule
// (datapath.RuleCounterer), per host, endpoint and direction.
func RuleCounters(ctx context.Context, labName string) ([]datapath.RuleCounter, error) {
	spec, dp, err := openDatapath(labName)
	if err != nil {
		return nil, err
	}
	rc, ok := dp.(datapath.RuleCounterer)
	if !ok {
		return nil, fmt.Errorf("datapath %s does not count per rule", spec.Datapath)
	}
	return rc.RuleCounters(ctx, spec)
}

// RuleTotal is one rule's counters summed over the hosts and endpoints.
type RuleTotal struct {
	Rule    string `json:"rule"`
	Verdict string `json:"verdict"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// SumRules sums counters per rule and verdict (a default deny per
// endpoint and direction: "default-deny ingress of y/b"), most packets
// first.
func SumRules(cs []datapath.RuleCounter) []RuleTotal {
	idx := map[[2]string]int{}
	var out []RuleTotal
	for _, c := range cs {
		rule := c.Rule
		if rule == datapath.DefaultDenyRule && c.Endpoint != "" {
			rule = fmt.Sprintf("%s %s of %s", rule, c.Direction, c.Endpoint)
		}
		k := [2]string{rule, c.Verdict}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, RuleTotal{Rule: rule, Verdict: c.Verdict})
		}
		out[i].Packets += c.Packets
		out[i].Bytes += c.Bytes
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Packets != out[j].Packets {
			return out[i].Packets > out[j].Packets
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}
