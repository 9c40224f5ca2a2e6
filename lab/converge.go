package lab

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/policy"
	proxyregistry "github.com/cnlab/cnlab/proxy/registry"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// Converge brings a lab that a killed (or failed) policy or Service change
// left unsettled back to its stored sets, without another apply: the
// commands that use a lab's traffic (probe, exec, monitor, run --lab)
// call it first. A settled lab costs a few file reads (the change records
// and each host's dirty mark and recorded set; nothing is parsed). An
// unsettled one is given its stored set again through the change protocol
// (op "repair": every dirty host rebuilt from its kernel, every clean one
// diffed, the record and staged files removed), under the lab's lock. A
// lab locked by a change that is running is left to it. It returns what
// it did, one line per kind, for the command to print.
//
// Until then `cnlab status` names the change and the hosts off the stored
// set (it never repairs: it is how one sees what a kill left).
func Converge(ctx context.Context, labName string) ([]string, error) {
	spec, err := readSpec(labName)
	if err != nil || spec == nil {
		return nil, nil // no lab, or not one with policies: the command says so itself
	}
	pol, svc := policyUnsettled(spec), servicesUnsettled(spec)
	if !pol && !svc {
		return nil, nil
	}
	if labBusy(labName) {
		return nil, nil
	}
	unlock, err := lockLab(labName)
	if err != nil {
		return nil, nil // a change started meanwhile: it settles the lab
	}
	defer unlock()
	var did []string
	var errs []string
	if pol {
		if ps := PolicyState(spec); ps != nil && ps.Troubled() {
			what := unsettledWhat(ps.Change, offHosts(ps.Hosts, func(h HostSet) (string, bool) { return h.Name, h.OffStored() }))
			if ps.Error != "" {
				errs = append(errs, "policies "+what+": the stored policy set cannot be read ("+ps.Error+"); the next apply rebuilds the hosts")
			} else if _, err := modifyLocked(ctx, labName, "repair", false, func(cur []*policy.Policy, _ *Change) ([]*policy.Policy, error) { return cur, nil }); err != nil {
				errs = append(errs, fmt.Sprintf("policies %s: giving every host the stored set failed: %v", what, err))
			} else {
				did = append(did, "policies "+what+": every host was given the stored policy set")
			}
		}
	}
	if svc {
		if ss := ServicesState(spec); ss != nil && ss.Troubled() {
			what := unsettledWhat(ss.Change, offHosts(ss.Hosts, func(h ProxyHostStatus) (string, bool) { return h.Name, h.Dirty || !h.InSync }))
			if ss.Error != "" {
				errs = append(errs, "Services "+what+": the stored Services cannot be read ("+ss.Error+"); the next change rebuilds the hosts")
			} else if _, err := modifyServicesLocked(ctx, labName, "repair", func(svcs []*service.Service, sls []*service.Slice, _ *ServiceChange) ([]*service.Service, []*service.Slice, error) {
				return svcs, sls, nil
			}); err != nil {
				errs = append(errs, fmt.Sprintf("Services %s: giving every host the stored Services failed: %v", what, err))
			} else {
				did = append(did, "Services "+what+": every host was given the stored Services")
			}
		}
	}
	if len(errs) > 0 {
		return did, fmt.Errorf("lab %s: %s", labName, strings.Join(errs, "; "))
	}
	return did, nil
}

// readSpec reads the spec of a lab that is up, nil for one without hosts.
func readSpec(labName string) (*topology.Spec, error) {
	st, err := ReadState(labName)
	if err != nil || st == nil || st.Phase != PhaseUp || st.Spec == nil || len(st.Spec.Hosts) == 0 {
		return nil, err
	}
	return st.Spec, nil
}

// policyUnsettled is the cheap look: a policy change record or staged set
// left, a dirty host, or hosts recorded on different sets.
func policyUnsettled(spec *topology.Spec) bool {
	if spec.Datapath == kind.None || spec.Chain != nil {
		return false
	}
	return storeUnsettled(policyStore(spec.Name)) || hostsUnsettled(spec, spec.Datapath)
}

// servicesUnsettled is policyUnsettled for the Services.
func servicesUnsettled(spec *topology.Spec) bool {
	sk, ok := proxyregistry.StateKind(spec.Services.Proxy)
	if !ok {
		return false
	}
	return storeUnsettled(serviceStore(spec.Name)) || hostsUnsettled(spec, sk)
}

func storeUnsettled(s change.Store) bool {
	if _, err := os.Lstat(s.Record); err == nil {
		return true
	}
	_, err := os.Lstat(s.Staged(0))
	return err == nil
}

// hostsUnsettled reports a dirty host or two hosts recorded on different
// sets (k: a datapath's kind or a proxy's state kind).
func hostsUnsettled(spec *topology.Spec, k kind.Kind) bool {
	first := ""
	for i, h := range spec.Hosts {
		hs := change.ReadHost(change.StatePath(spec.Name, k, h.Name))
		if hs.Dirty {
			return true
		}
		if i == 0 {
			first = hs.Sets[0]
		} else if hs.Sets[0] != first {
			return true
		}
	}
	return false
}

// offHosts names the hosts off the stored set.
func offHosts[H any](hosts []H, off func(H) (string, bool)) []string {
	var out []string
	for _, h := range hosts {
		if name, o := off(h); o {
			out = append(out, name)
		}
	}
	return out
}

// unsettledWhat says what was left: the change and where it died, and the
// hosts off the stored set.
func unsettledWhat(c *ChangeStatus, off []string) string {
	var parts []string
	if c != nil {
		where := map[string]string{
			KilledBeforeStaged: "killed before it was staged",
			KilledStaged:       "killed between staged and committed",
			KilledCommitted:    "killed between committed and cleanup",
		}[c.Killed]
		if where == "" {
			where = "left unfinished"
		}
		parts = append(parts, fmt.Sprintf("(a %s by pid %d %s)", c.Op, c.Pid, where))
	}
	if len(off) > 0 {
		parts = append(parts, "with host(s) "+strings.Join(off, ", ")+" off the stored set")
	}
	if len(parts) == 0 {
		return "unsettled"
	}
	return strings.Join(parts, " ")
}
