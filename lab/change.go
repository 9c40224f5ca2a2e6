package lab

import (
	"bufio"
	"context"
	"fmt"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/l7proxy/deploy"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
	"golang.org/x/sys/unix"
)

// A change (of policies, of Services) leaves three kinds of files in the
// lab's directory while it runs: its record (written first and removed
// last), the staged set (beside the stored files, renamed over them to
// commit it) and, per host, the datapath's or proxy's dirty mark and
// recorded set (change.ReadHost). Left behind by a killed change, they
// tell PolicyState and ServicesState what holds; the next change
// overwrites or clears them. internal/change implements the protocol.

func changePath(lab string) string { return filepath.Join(labDir(lab), "change.json") }

// policyStore is where a lab's policies are stored and a policy change
// records and stages itself.
func policyStore(lab string) change.Store {
	return change.Store{What: "policies", Record: changePath(lab), Files: []string{policiesPath(lab)}}
}

func stagedPath(lab string) string { return policyStore(lab).Staged(0) }

// Where a change was killed, as ChangeStatus.Killed says.
const (
	// KilledBeforeStaged: recorded, its set not yet staged; nothing changed.
	KilledBeforeStaged = change.KilledBeforeStaged
	// KilledStaged: between staged and committed; the store holds the set
	// from before the change, hosts may hold either.
	KilledStaged = change.KilledStaged
	// KilledCommitted: between committed and cleanup; the store holds the
	// change's set, and so does every host.
	KilledCommitted = change.KilledCommitted
)

// PolicyStatus is what a lab's files say of its policies: the stored set,
// a change that is running or was killed, and the set each host enforces.
// It is read from files only; `probe --expect` asks the kernel.
type PolicyStatus struct {
	Stored    int           `json:"stored"`    // policies in the stored set
	StoredSet string        `json:"storedSet"` // its policy.Digest
	Staged    *StagedSet    `json:"staged,omitempty"`
	Change    *ChangeStatus `json:"change,omitempty"`
	Hosts     []HostSet     `json:"hosts"`
	Error     string        `json:"error,omitempty"` // the stored set cannot be read
}

// StagedSet is a set written beside the stored one and not committed.
type StagedSet struct {
	Policies int    `json:"policies"`
	Set      string `json:"set"` // "" when the file cannot be read
}

// ChangeStatus is a change (of policies, of Services) found running, or
// the record a killed one left.
type ChangeStatus struct {
	Op      string    `json:"op"`
	Pid     int       `json:"pid"`
	Started time.Time `json:"started"`
	Created []string  `json:"created,omitempty"`
	Updated []string  `json:"updated,omitempty"`
	Deleted []string  `json:"deleted,omitempty"`
	// Running: its process holds the lab's lock now. Otherwise it was
	// killed, and Killed says where (KilledBeforeStaged, KilledStaged,
	// KilledCommitted).
	Running bool   `json:"running"`
	Killed  string `json:"killed,omitempty"`
}

// Holds values of HostSet.
const (
	HoldsStored  = "stored"  // the stored set
	HoldsStaged  = "staged"  // the set of a change not committed
	HoldsOther   = "other"   // neither (left by a change that failed)
	HoldsUnknown = "unknown" // not recorded
)

// HostSet is the set (of policies, of Services) a host enforces, as its
// files say.
type HostSet struct {
	Name string `json:"name"`
	// Dirty: a change was interrupted, failed or is running on the host;
	// the next apply rebuilds it from the kernel.
	Dirty bool `json:"dirty"`
	// Holds lists the sets its kernel may hold (exactly one of them):
	// one when the host is clean.
	Holds []string `json:"holds"`
}

// OffStored reports whether the host may hold a set other than the stored.
func (h HostSet) OffStored() bool { return h.Dirty || !slices.Equal(h.Holds, []string{HoldsStored}) }

// Troubled reports whether a change is left unfinished or a host may not
// enforce the stored set.
func (p *PolicyStatus) Troubled() bool {
	if p.Change != nil || p.Staged != nil || p.Error != "" {
		return true
	}
	for _, h := range p.Hosts {
		if h.OffStored() {
			return true
		}
	}
	return false
}

// PolicyState reads what a lab's files say of its policies; nil for a lab
// without a datapath (nil spec, a chain). Status leaves it out: it parses
// the stored and the staged set.
func PolicyState(spec *topology.Spec) *PolicyStatus {
	if spec == nil || spec.Datapath == kind.None || spec.Chain != nil || len(spec.Hosts) == 0 {
		return nil
	}
	ps := &PolicyStatus{Hosts: []HostSet{}}
	pols, err := Policies(spec.Name)
	if err != nil {
		ps.Error = err.Error()
	} else {
		ps.Stored, ps.StoredSet = len(pols), policy.Digest(pols)
	}
	if data, err := os.ReadFile(stagedPath(spec.Name)); err == nil {
		ps.Staged = &StagedSet{}
		if staged, err := policy.Parse(data, stagedPath(spec.Name)); err == nil || strings.TrimSpace(string(data)) == "" {
			ps.Staged.Policies, ps.Staged.Set = len(staged), policy.Digest(staged)
		}
	}
	ps.Change = changeStatus(spec.Name, policyStore(spec.Name), ps.StoredSet)
	staged := ""
	if ps.Staged != nil {
		staged = ps.Staged.Set
	}
	ps.Hosts = hostSets(spec, spec.Datapath, ps.StoredSet, staged)
	return ps
}

// changeStatus reads the record a change of store left: running (its
// process holds the lab's lock) or killed, and where. stored is the
// digest of the stored set ("" unreadable).
func changeStatus(lab string, store change.Store, stored string) *ChangeStatus {
	rec := store.ReadRecord()
	if rec == nil {
		return nil
	}
	c := &ChangeStatus{Op: rec.Op, Pid: rec.Pid, Started: rec.Started, Created: rec.Created, Updated: rec.Updated, Deleted: rec.Deleted}
	if lockHolder(lab) != 0 {
		c.Running = true
	} else {
		c.Killed = store.Killed(rec, stored)
	}
	return c
}

// hostSets says which sets each host's kernel may hold, from the state
// files of k (a datapath's kind, a proxy's state kind): stored and staged
// are the digests of the stored and the staged set ("" unreadable, none).
func hostSets(spec *topology.Spec, k kind.Kind, stored, staged string) []HostSet {
	out := []HostSet{}
	for _, h := range spec.Hosts {
		hp := change.ReadHost(change.StatePath(spec.Name, k, h.Name))
		hs := HostSet{Name: h.Name, Dirty: hp.Dirty}
		for _, set := range hp.Sets {
			what := HoldsOther
			switch {
			case set == "":
				what = HoldsUnknown
			case stored != "" && set == stored:
				what = HoldsStored
			case staged != "" && set == staged:
				what = HoldsStaged
			}
			if !slices.Contains(hs.Holds, what) {
				hs.Holds = append(hs.Holds, what)
			}
		}
		out = append(out, hs)
	}
	return out
}

// offStored lists the hosts whose files (those of k, a datapath's kind or
// a proxy's state kind) do not say they enforce set: dirty, or recorded on
// another set.
func offStored(spec *topology.Spec, k kind.Kind, set string) []string {
	var out []string
	for _, h := range spec.Hosts {
		hp := change.ReadHost(change.StatePath(spec.Name, k, h.Name))
		if hp.Dirty || hp.Sets[0] != set {
			out = append(out, h.Name)
		}
	}
	return out
}

// abort ends a change that failed after it was staged. The datapath put
// back the hosts it could; hosts it rebuilt (their previous state was not
// known, after a killed change) keep the new set, and hosts whose state
// could not be saved stay dirty: the stored set is applied again so that
// they enforce it too. Then the staged set and the record go.
func abort(ctx context.Context, spec *topology.Spec, dp datapath.Datapath, cur []*policy.Policy, curKnown bool, cause error) error {
	err := cause
	if off := offStored(spec, spec.Datapath, policy.Digest(cur)); len(off) > 0 {
		hosts := strings.Join(off, ", ")
		switch {
		case !curKnown:
			err = fmt.Errorf("%w; host(s) %s may not enforce the stored policy set, which this cnlab cannot read", cause, hosts)
		default:
			if _, rerr := applyLocked(context.WithoutCancel(ctx), spec, dp, cur); rerr != nil {
				err = fmt.Errorf("%w; host(s) %s were left off the stored policy set, and applying it again failed too: %w (the next apply rebuilds them)", cause, hosts, rerr)
			} else {
				err = fmt.Errorf("%w (host(s) %s were given the stored policy set again)", cause, hosts)
			}
		}
	}
	// The L7 proxies may have taken the new rules although no datapath
	// switched (the push, or a datapath, failed later): give them the
	// stored set again.
	if curKnown && l7Proxies(spec) {
		if c, cerr := compile(spec, cur); cerr == nil {
			if _, perr := deploy.Push(context.WithoutCancel(ctx), spec, c, false); perr != nil {
				err = fmt.Errorf("%w; the L7 proxies could not be given the stored policy set again: %w", err, perr)
			}
		}
	}
	if cerr := policyStore(spec.Name).End(); cerr != nil {
		err = fmt.Errorf("%w; removing the staged policy set failed: %w", err, cerr)
	}
	return err
}

// l7Proxies reports whether an L7 proxy runs on some host of the lab.
func l7Proxies(spec *topology.Spec) bool {
	for _, h := range spec.Hosts {
		if l7proxy.Pid(spec.Name, h.Name) != 0 {
			return true
		}
	}
	return false
}

// lockHolder returns the pid of the process holding the lab's lock, or 0,
// from /proc/locks: status must not take the lock to find out, or a change
// started at that instant would find the lab busy.
func lockHolder(lab string) int {
	var st unix.Stat_t
	if err := unix.Stat(lockPath(lab), &st); err != nil {
		return 0
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		if labBusyProbe(lab) {
			return -1
		}
		return 0
	}
	defer f.Close()
	dev := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 3568 00:1a:1234 0 EOF"; a waiter has
		// "->" after the number.
		fl := strings.Fields(sc.Text())
		if len(fl) > 1 && fl[1] == "->" {
			continue
		}
		if len(fl) < 6 || fl[1] != "FLOCK" || fl[5] != dev {
			continue
		}
		if pid, err := strconv.Atoi(fl[4]); err == nil && pid > 0 {
			return pid
		}
		return -1
	}
	return 0
}
