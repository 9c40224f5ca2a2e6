package topology

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/internal/testutil"
)

// TestOVSChains builds chains whose neighbours are joined through Open
// vSwitch bridges (userspace datapath, daemons of the lab's own), carries
// TCP through them, and checks that deleting the lab leaves no daemon and
// no file behind.
func TestOVSChains(t *testing.T) {
	requireOVS(t)
	for i, chain := range []string{
		"{length: 0, link: ovs}",
		"{length: 2, link: ovs}",
		"{length: 0, link: ovs, switches: 3}",                   // seed 001's figure 5, patch ports
		"{length: 0, link: ovs, switches: 3, switchLink: veth}", // and veth pairs
	} {
		t.Run(chain, func(t *testing.T) {
			s, err := Parse([]byte(fmt.Sprintf("name: t-ovs-%d\nchain: %s\n", i, chain)), "t.yaml", Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(s.Netns(), " "), OVSNetns(s.Name)) {
				t.Errorf("the lab's namespaces %v leave out its OvS namespace", s.Netns())
			}
			upForTest(t, s)
			checkAllPairs(t, s)
			if n := len(ovsDaemons(t, s.Name)); n != 2 {
				t.Errorf("%d OvS daemons of the lab running, want ovsdb-server and ovs-vswitchd", n)
			}
			if err := Teardown(s.Name, nil); err != nil {
				t.Fatal(err)
			}
			if left := ovsDaemons(t, s.Name); len(left) > 0 {
				t.Errorf("OvS daemons left after teardown: %v", left)
			}
			if _, err := os.Stat(ovsDir(s.Name)); !os.IsNotExist(err) {
				t.Errorf("%s left after teardown (%v)", ovsDir(s.Name), err)
			}
		})
	}
}

// TestOVSDownWithoutRunDir: a lab whose run directory is gone (its OvS
// pid files, sockets and database with it, as after a crash that lost
// /run/cnlab) still has its daemons stopped by Teardown, found from the
// kernel's state: they run in a namespace of the lab.
func TestOVSDownWithoutRunDir(t *testing.T) {
	requireOVS(t)
	s, err := Parse([]byte("name: t-ovs-lost\nchain: {length: 1, link: ovs, switches: 2}\n"), "t.yaml", Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	upForTest(t, s)
	if n := len(ovsDaemons(t, s.Name)); n != 2 {
		t.Fatalf("%d OvS daemons of the lab running, want 2", n)
	}
	if err := os.RemoveAll(rundir.Lab(s.Name)); err != nil {
		t.Fatal(err)
	}
	if err := Teardown(s.Name, nil); err != nil {
		t.Fatal(err)
	}
	if left := ovsDaemons(t, s.Name); len(left) > 0 {
		t.Errorf("OvS daemons left after teardown: %v", left)
	}
	if names, _ := Netns(s.Name); len(names) > 0 {
		t.Errorf("namespaces left after teardown: %v", names)
	}
}

// requireOVS skips the test without root or Open vSwitch (fails it under
// CI), naming the package to install.
func requireOVS(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	for _, tool := range ovsTools {
		testutil.RequireTool(t, tool, OVSPackage)
	}
}

// ovsDaemons lists the OvS processes whose files are in the lab's run
// directory.
func ovsDaemons(t *testing.T, lab string) []string {
	t.Helper()
	out, _ := exec.Command("pgrep", "-a", "-f", "ovs(db-server|-vswitchd).*"+ovsDir(lab)).Output()
	var procs []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			procs = append(procs, l)
		}
	}
	return procs
}

// TestOVSDefaults: a segment of link ovs has one bridge; bridges in series
// are joined by patch ports unless the file says veth.
func TestOVSDefaults(t *testing.T) {
	for _, tc := range []struct {
		chain    string
		switches int
		link     string
	}{
		{"{length: 1, link: ovs}", 1, SwitchPatch},
		{"{length: 0, link: ovs, switches: 20}", 20, SwitchPatch},
		{"{length: 0, link: ovs, switches: 2, switchLink: veth}", 2, SwitchVeth},
		{"{length: 1, link: veth}", 0, ""},
	} {
		s, err := Parse([]byte("name: x\nchain: "+tc.chain+"\n"), "t.yaml", Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Chain.Switches != tc.switches || s.Chain.SwitchLink != tc.link {
			t.Errorf("%s: %d switches joined by %q, want %d by %q", tc.chain, s.Chain.Switches, s.Chain.SwitchLink, tc.switches, tc.link)
		}
	}
}
