package experiment

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
)

// upOther brings up a lab the run did not build, as a user would, and
// registers its teardown.
func upOther(t *testing.T, name string) {
	t.Helper()
	spec, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Up(context.Background(), spec, lab.UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(name, nil); err != nil {
			t.Errorf("down %s: %v", name, err)
		}
	})
}

func stillUp(t *testing.T, name string) {
	t.Helper()
	if labs, err := lab.Labs(); err != nil || !slices.Contains(labs, name) {
		t.Fatalf("the lab %s the run did not build is gone (%v)", name, err)
	}
	if st, err := lab.Status(name); err != nil || st.Health != lab.HealthUp {
		t.Fatalf("the lab %s the run did not build is damaged: %+v %v", name, st, err)
	}
}

// TestRunRefusesATakenLabName: --lab naming a lab that is up is refused
// before the run starts, as bad input, and the lab is left alone.
func TestRunRefusesATakenLabName(t *testing.T) {
	testutil.RequireRoot(t)
	upOther(t, "t-exp-taken")
	out := filepath.Join(t.TempDir(), "run")
	_, err := runShort(t, context.Background(), shortExp, Options{Out: out, LabName: "t-exp-taken"})
	if err == nil || !input.Is(err) || !strings.Contains(err.Error(), "t-exp-taken") || !strings.Contains(err.Error(), "already up") {
		t.Errorf("got %v, want an input error saying the lab is up", err)
	}
	if _, serr := results.Load(out); serr == nil {
		t.Error("the run started (results.json written)")
	}
	stillUp(t, "t-exp-taken")
}

// TestEnsureLabLeavesAForeignLab: when the lab's name is taken between
// the check and the build (another run drew the same name), the build
// fails and the other lab is not torn down.
func TestEnsureLabLeavesAForeignLab(t *testing.T) {
	testutil.RequireRoot(t)
	upOther(t, "t-exp-race")
	s, err := Parse([]byte(shortExp), "short.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Out: t.TempDir(), LabName: "t-exp-race"}
	ru := &runner{s: s, o: o, r: &results.Results{}, be: newBackend(o, &results.Environment{}, func(string) {}), prog: newProgress(nil, false, 1, 0)}
	err = ru.ensureUp(context.Background(), results.Params{Topology: "single-host", Datapath: kind.IPTables})
	if !errors.Is(err, lab.ErrAlreadyUp) {
		t.Errorf("got %v, want the lab reported up already", err)
	}
	if terr := ru.teardown(); terr != nil {
		t.Error(terr)
	}
	stillUp(t, "t-exp-race")
}
