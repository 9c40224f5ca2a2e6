package lab

import (
	"bufio"
	"context"
	"errors"
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
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
	"golang.org/x/sys/unix"
)

// A policy change leaves three kinds of files in the lab's directory while
// it runs: its record (change.json, written first and removed last), the
// staged set (policies.yaml.new, renamed over policies.yaml to commit it)
// and, per host, the datapath's dirty mark and recorded set
// (change.ReadHost). Left behind by a killed change, they tell
// PolicyStatus what holds; the next change overwrites or clears them.

func changePath(lab string) string { return filepath.Join(labDir(lab), "change.json") }

func stagedPath(lab string) string { return policiesPath(lab) + ".new" }

// changeRecord is what a policy change writes before it stages its set.
type changeRecord struct {
	Op      string    `json:"op"` // apply, replace or delete
	Pid     int       `json:"pid"`
	Started time.Time `json:"started"`
	From    string    `json:"from"` // policy.Digest of the stored set before ("" unreadable)
	To      string    `json:"to"`   // policy.Digest of the set it stores
	Created []string  `json:"created,omitempty"`
	Updated []string  `json:"updated,omitempty"`
	Deleted []string  `json:"deleted,omitempty"`
}

// Where a change was killed, as PolicyChange.Killed says.
const (
	// KilledBeforeStaged: recorded, its set not yet staged; nothing changed.
	KilledBeforeStaged = "before-staged"
	// KilledStaged: between staged and committed; the store holds the set
	// from before the change, hosts may hold either.
	KilledStaged = "staged"
	// KilledCommitted: between committed and cleanup; the store holds the
	// change's set, and so does every host.
	KilledCommitted = "committed"
)

// PolicyStatus is what a lab's files say of its policies: the stored set,
// a change that is running or was killed, and the set each host enforces.
// It is read from files only; `probe --expect` asks the kernel.
type PolicyStatus struct {
	Stored    int           `json:"stored"`    // policies in the stored set
	StoredSet string        `json:"storedSet"` // its policy.Digest
	Staged    *StagedSet    `json:"staged,omitempty"`
	Change    *PolicyChange `json:"change,omitempty"`
	Hosts     []HostSet     `json:"hosts"`
	Error     string        `json:"error,omitempty"` // the stored set cannot be read
}

// StagedSet is a set written beside the stored one and not committed.
type StagedSet struct {
	Policies int    `json:"policies"`
	Set      string `json:"set"` // "" when the file cannot be read
}

// PolicyChange is a policy change found running, or the record a killed
// one left.
type PolicyChange struct {
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

// HostSet is the policy set a host enforces, as its files say.
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
	var rec changeRecord
	if files.ReadJSON(changePath(spec.Name), &rec) == nil {
		pc := &PolicyChange{Op: rec.Op, Pid: rec.Pid, Started: rec.Started, Created: rec.Created, Updated: rec.Updated, Deleted: rec.Deleted}
		switch pid := lockHolder(spec.Name); {
		case pid != 0:
			pc.Running = true
		case ps.Staged != nil:
			pc.Killed = KilledStaged
		case ps.Error == "" && ps.StoredSet == rec.To:
			pc.Killed = KilledCommitted
		default:
			pc.Killed = KilledBeforeStaged
		}
		ps.Change = pc
	}
	staged := ""
	if ps.Staged != nil {
		staged = ps.Staged.Set
	}
	for _, h := range spec.Hosts {
		hp := change.ReadHost(change.StatePath(spec.Name, spec.Datapath, h.Name))
		hs := HostSet{Name: h.Name, Dirty: hp.Dirty}
		for _, set := range hp.Sets {
			what := HoldsOther
			switch {
			case set == "":
				what = HoldsUnknown
			case ps.Error == "" && set == ps.StoredSet:
				what = HoldsStored
			case set == staged:
				what = HoldsStaged
			}
			if !slices.Contains(hs.Holds, what) {
				hs.Holds = append(hs.Holds, what)
			}
		}
		ps.Hosts = append(ps.Hosts, hs)
	}
	return ps
}

// beginChange records a change and stages its set (in that order: a
// staged set always has its record, unless an older cnlab left it).
func beginChange(lab string, rec *changeRecord, next []*policy.Policy) error {
	if err := files.WriteJSON(changePath(lab), rec, true); err != nil {
		return fmt.Errorf("record policy change: %w", err)
	}
	if err := files.WriteAtomic(stagedPath(lab), policy.Encode(next)); err != nil {
		return fmt.Errorf("store policies: %w", err)
	}
	return nil
}

// commitChange makes the staged set the stored one (a rename).
func commitChange(lab string) error {
	if err := os.Rename(stagedPath(lab), policiesPath(lab)); err != nil {
		return fmt.Errorf("store policies: %w", err)
	}
	return nil
}

// endChange is the cleanup of a change, done or failed: its staged set (if
// not committed) and its record go.
func endChange(lab string) error {
	var errs []error
	for _, p := range []string{stagedPath(lab), changePath(lab)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// offStored lists the hosts whose files do not say they enforce set: dirty,
// or recorded on another set.
func offStored(spec *topology.Spec, set string) []string {
	var out []string
	for _, h := range spec.Hosts {
		hp := change.ReadHost(change.StatePath(spec.Name, spec.Datapath, h.Name))
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
	if off := offStored(spec, policy.Digest(cur)); len(off) > 0 {
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
	if cerr := endChange(spec.Name); cerr != nil {
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
