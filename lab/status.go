package lab

import (
	"errors"
	"os"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
)

// Lab health as reported by Status.
const (
	HealthUp         = "up"         // ledger says up and every namespace is there
	HealthCreating   = "creating"   // an `up` is running right now
	HealthIncomplete = "incomplete" // an interrupted up, or namespaces missing
	HealthOrphaned   = "orphaned"   // namespaces in the kernel but no ledger
)

// LabStatus describes a lab as found on the machine.
type LabStatus struct {
	Name        string         `json:"name"`
	Health      string         `json:"phase"`
	Created     *time.Time     `json:"created,omitempty"`
	NetnsKernel []string       `json:"-"`
	Missing     []string       `json:"missingNetns,omitempty"`
	Spec        *topology.Spec `json:"-"` // nil for an orphaned lab
}

// Status reports on one lab, from the kernel's state and the ledger.
func Status(lab string) (*LabStatus, error) {
	if err := CheckName(lab); err != nil {
		return nil, err
	}
	names, err := topology.Netns(lab)
	if err != nil {
		return nil, err
	}
	st, err := ReadState(lab)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if st == nil && len(names) == 0 {
		return nil, &topology.NotFoundError{What: "lab", Name: lab}
	}
	ls := &LabStatus{Name: lab, NetnsKernel: names}
	if st == nil {
		ls.Health = HealthOrphaned
		return ls, nil
	}
	ls.Spec = st.Spec
	created := st.Created
	ls.Created = &created
	for _, n := range st.Spec.Netns() {
		if !netns.Exists(n) {
			ls.Missing = append(ls.Missing, n)
		}
	}
	switch {
	case st.Phase == PhaseCreating && labBusy(lab):
		ls.Health = HealthCreating
	case st.Phase != PhaseUp || len(ls.Missing) > 0:
		ls.Health = HealthIncomplete
	default:
		ls.Health = HealthUp
	}
	return ls, nil
}

// StatusAll reports on every lab on the machine.
func StatusAll() ([]*LabStatus, error) {
	labs, err := Labs()
	if err != nil {
		return nil, err
	}
	var out []*LabStatus
	for _, l := range labs {
		s, err := Status(l)
		var nf *topology.NotFoundError
		if errors.As(err, &nf) {
			continue // went away meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Open returns the spec of a lab that is up, for commands that work on a
// running lab (exec, policy, probe).
func Open(lab string) (*topology.Spec, error) {
	s, err := Status(lab)
	if err != nil {
		return nil, err
	}
	switch s.Health {
	case HealthUp:
		return s.Spec, nil
	case HealthOrphaned:
		return nil, errors.New("lab " + lab + " has namespaces but no ledger (left by a crash?): run `cnlab down " + lab + "`")
	}
	return nil, errors.New("lab " + lab + " is " + s.Health + ": run `cnlab down " + lab + "` and `cnlab up` again")
}
