package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/topology"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/labels"
	"golang.org/x/sys/unix"
)

// The ledger (rundir.Lab(LAB)/lab.json) is a convenience for status, exec
// and the commands that change a running lab: teardown never depends on it.

// Lab phases recorded in the ledger.
const (
	PhaseCreating = "creating"
	PhaseUp       = "up"
)

// State is the ledger of a lab, persisted in rundir.Lab(LAB)/lab.json.
type State struct {
	Schema  int            `json:"schema"`
	Phase   string         `json:"phase"`
	Created time.Time      `json:"created"`
	Pid     int            `json:"pid"` // process that ran `up`
	Spec    *topology.Spec `json:"spec"`
	// L7Proxies are the pids of the L7 proxies started, per host (they
	// run in the host's namespace: down kills them with the rest).
	L7Proxies map[string]int `json:"l7Proxies,omitempty"`
}

// recordProxies adds the proxies started to the ledger.
func recordProxies(lab string, pids map[string]int) error {
	st, err := ReadState(lab)
	if err != nil {
		return err
	}
	if st.L7Proxies == nil {
		st.L7Proxies = map[string]int{}
	}
	for h, pid := range pids {
		st.L7Proxies[h] = pid
	}
	return writeState(st)
}

func labDir(lab string) string { return rundir.Lab(lab) }

func writeState(st *State) error {
	if err := files.WriteJSON(filepath.Join(labDir(st.Spec.Name), "lab.json"), st, true); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// ReadState loads a lab's ledger. It returns an error wrapping
// os.ErrNotExist when the lab has none.
func ReadState(lab string) (*State, error) {
	var st State
	err := files.ReadJSON(filepath.Join(labDir(lab), "lab.json"), &st)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read state of lab %s: %w", lab, err)
	}
	return &st, nil
}

func removeState(lab string) error {
	if err := os.RemoveAll(labDir(lab)); err != nil {
		return fmt.Errorf("remove state of lab %s: %w", lab, err)
	}
	return nil
}

// CheckName validates a lab name given on the command line, so that it
// can never name a path outside cnlab's directories.
func CheckName(lab string) error {
	if err := labels.CheckDNSLabel(lab, topology.MaxLabName); err != nil {
		return &input.Error{File: "LAB", Msg: fmt.Sprintf("lab name: %v", err)}
	}
	return nil
}

func lockPath(lab string) string { return filepath.Join(rundir.Dir, "."+lab+".lock") }

// lockLab takes an exclusive lock on the lab so that two cnlab processes
// never build or tear down the same lab at once. The lock is released when
// the returned function is called or the process dies. The lock file is
// removed on release when the lab no longer exists; a process that locked
// a file just removed sees that the path now names another file (or none)
// and locks again, so two processes never hold two files of one name.
func lockLab(lab string) (func(), error) {
	if err := CheckName(lab); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(rundir.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", rundir.Dir, err)
	}
	for {
		f, err := os.OpenFile(lockPath(lab), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock lab %s: %w", lab, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("lab %s is busy: another cnlab process is changing it", lab)
			}
			return nil, fmt.Errorf("lock lab %s: %w", lab, err)
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(lockPath(lab), &now) != nil || held.Ino != now.Ino {
			f.Close() // removed by the previous holder: lock the new file
			continue
		}
		return func() {
			if !labExists(lab) {
				_ = os.Remove(f.Name())
			}
			f.Close()
		}, nil
	}
}

// labExists reports whether anything of the lab is left: a ledger or a
// namespace.
func labExists(lab string) bool {
	if _, err := os.Stat(labDir(lab)); err == nil {
		return true
	}
	names, _ := topology.Netns(lab)
	return len(names) > 0
}

// labBusy reports whether some process holds the lab's lock right now.
func labBusy(lab string) bool { return lockHolder(lab) != 0 }

// labBusyProbe finds out by taking the lock shared for an instant, where
// /proc/locks cannot be read: a change that tries to lock the lab at that
// instant finds it busy.
func labBusyProbe(lab string) bool {
	f, err := os.Open(lockPath(lab))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// Labs lists every lab present on the machine: those with namespaces in the
// kernel, with datapath state outside them (pins) and with a ledger, sorted
// by name.
func Labs() ([]string, error) {
	set := map[string]bool{}
	inKernel, err := topology.KernelLabs()
	if err != nil {
		return nil, err
	}
	for _, l := range inKernel {
		set[l] = true
	}
	for _, l := range registry.Labs() {
		if CheckName(l) == nil { // a stray directory in bpffs is no lab
			set[l] = true
		}
	}
	ents, err := os.ReadDir(rundir.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", rundir.Dir, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			set[e.Name()] = true
		}
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out, nil
}
