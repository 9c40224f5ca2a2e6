package datapath_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// The tests of this file interrupt or break an apply at a chosen point and
// check, with the probe, that the kernel ends up enforcing what cnlab's
// policy store says once the same policy set is applied again.

func TestMain(m *testing.M) { testutil.Main(m) }

var short = map[string]string{"iptables": "ipt", "nftables": "nft"}

func upLab(t *testing.T, name, dp string) *topology.Spec {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	ov := topology.Overrides{Name: name, Datapath: dp}
	if dp == "iptables-ipsets" {
		testutil.RequireTool(t, "ipset", "ipset")
		ov.Datapath, ov.Options.Peers = "iptables", kind.PeersIPSets
	}
	spec, err := topology.Parse([]byte(scenarios.Lab), "scenario lab", ov)
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Up(context.Background(), spec, lab.UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(spec.Name, nil); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	return spec
}

func parse(t *testing.T, yaml string) []*policy.Policy {
	t.Helper()
	pols, err := policy.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pols
}

// denyAll isolates the ingress of every endpoint of namespace x (two on
// host flip, one on host flap) and allows nothing.
const denyAll = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: x}
spec:
  podSelector: {}
  policyTypes: [Ingress]
`

var defaultTargets = []probe.Target{{Protocol: "TCP", Port: 80}, {Protocol: "UDP", Port: 81}}

// expectStore probes the lab and fails on every cell where the kernel does
// not do what the stored policies say.
func expectStore(t *testing.T, spec *topology.Spec, what string, targets ...probe.Target) {
	t.Helper()
	if len(targets) == 0 {
		targets = defaultTargets
	}
	pols, err := lab.Policies(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.NewModel(spec, pols)
	if err != nil {
		t.Fatal(err)
	}
	cells, err := probe.Run(context.Background(), spec, targets, probe.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("%s: probe: %v", what, err)
	}
	wrong := probe.Expect(spec, m, cells)
	for i, c := range wrong {
		if i == 6 {
			t.Errorf("%s: %d cells differ in all", what, len(wrong))
			break
		}
		t.Errorf("%s: %s -> %s %s/%d: probed allowed=%v, the stored policies (%d) say %v",
			what, c.From, c.To, c.Protocol, c.Port, c.Allowed, len(pols), *c.Expected)
	}
}

var errCrash = errors.New("simulated crash between the kernel and the state file")

// crashAfterKernel runs f with cnlab "killed" on host just after that
// host's kernel transaction committed and before its state was saved.
func crashAfterKernel(t *testing.T, host string, f func()) {
	t.Helper()
	datapath.SetAfterKernel(func(h string) {
		if h == host {
			panic(errCrash)
		}
	})
	defer datapath.SetAfterKernel(nil)
	defer func() {
		if r := recover(); r != errCrash {
			if r == nil {
				t.Fatalf("the apply never reached host %s's save", host)
			}
			panic(r)
		}
	}()
	f()
}

// TestInterruptedDelete deletes a deny-all and is killed after the kernel
// of one host opened up: the store still says deny-all, so applying
// deny-all again must close that host again.
func TestInterruptedDelete(t *testing.T) {
	for _, dp := range []string{"iptables", "nftables"} { // the netfilter datapaths: their tool, their state file per host
		t.Run(dp, func(t *testing.T) {
			spec := upLab(t, "t-intdel-"+short[dp], dp)
			ctx := context.Background()
			for _, host := range []string{"flip", "flap"} {
				if _, err := lab.Apply(ctx, spec.Name, parse(t, denyAll)); err != nil {
					t.Fatal(err)
				}
				crashAfterKernel(t, host, func() {
					_, _ = lab.Delete(ctx, spec.Name, []string{"x/deny-all"}, false, "")
				})
				pols, err := lab.Policies(spec.Name)
				if err != nil || len(pols) != 1 {
					t.Fatalf("the store should still hold deny-all: %v %v", pols, err)
				}
				if _, err := lab.Apply(ctx, spec.Name, pols); err != nil {
					t.Fatalf("re-apply after a crash on %s: %v", host, err)
				}
				expectStore(t, spec, "deny-all re-applied after a delete killed on "+host)
				if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
					t.Fatal(err)
				}
				expectStore(t, spec, "deleted after the crash on "+host)
			}
		})
	}
}

// ranges allows 40 port ranges and 80-81 into namespace x from anywhere:
// replacing it with another base deletes more than 32 interval-set
// elements, so the nftables datapath builds a new generation.
func ranges(base int) string {
	var b strings.Builder
	b.WriteString("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: ranges, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - ports:\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&b, "    - {port: %d, endPort: %d}\n", base+10*i, base+10*i+1)
	}
	b.WriteString("    - {port: 80, endPort: 81}\n")
	return b.String()
}

var rangeTargets = []probe.Target{{Protocol: "TCP", Port: 80}, {Protocol: "TCP", Port: 1000}, {Protocol: "TCP", Port: 3000}}

// TestInterruptedGeneration kills an nftables apply after one host
// switched to a new generation: its state file still names the old one.
// Applying again (the stored set, then the new one) must work.
func TestInterruptedGeneration(t *testing.T) {
	spec := upLab(t, "t-intgen", "nftables")
	ctx := context.Background()
	for _, host := range []string{"flip", "flap"} {
		if _, err := lab.Apply(ctx, spec.Name, parse(t, ranges(1000))); err != nil {
			t.Fatal(err)
		}
		crashAfterKernel(t, host, func() {
			_, _ = lab.Apply(ctx, spec.Name, parse(t, ranges(3000)))
		})
		pols, err := lab.Policies(spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lab.Apply(ctx, spec.Name, pols); err != nil {
			t.Fatalf("re-apply the stored set after a crash on %s: %v", host, err)
		}
		expectStore(t, spec, "stored ranges re-applied after a crash on "+host, rangeTargets...)
		if _, err := lab.Apply(ctx, spec.Name, parse(t, ranges(3000))); err != nil {
			t.Fatalf("apply the new set after a crash on %s: %v", host, err)
		}
		expectStore(t, spec, "new ranges applied after a crash on "+host, rangeTargets...)
		if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStaleGeneration gives a host a state file whose generation is not
// the kernel's, without any mark (a hand edit, a state file from an older
// cnlab): the next applies must still work.
func TestStaleGeneration(t *testing.T) {
	spec := upLab(t, "t-stalegen", "nftables")
	ctx := context.Background()
	if _, err := lab.Apply(ctx, spec.Name, parse(t, ranges(1000))); err != nil {
		t.Fatal(err)
	}
	path := change.StatePath(spec.Name, kind.NFTables, "flap")
	var st map[string]any
	if err := change.LoadState(path, &st); err != nil {
		t.Fatal(err)
	}
	st["gen"] = 7
	if err := change.SaveState(path, st); err != nil {
		t.Fatal(err)
	}
	for i, base := range []int{3000, 1000} {
		if _, err := lab.Apply(ctx, spec.Name, parse(t, ranges(base))); err != nil {
			t.Fatalf("apply %d after the state file lost the generation: %v", i, err)
		}
		expectStore(t, spec, fmt.Sprintf("ranges from %d", base), rangeTargets...)
	}
	if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
		t.Fatal(err)
	}
}

// TestSaveFails makes one host's state file impossible to write: the
// apply must fail and leave every host on the old policy, and work once the
// state can be written again.
func TestSaveFails(t *testing.T) {
	for _, dp := range []string{"iptables", "nftables"} { // the netfilter datapaths: their tool, their state file per host
		t.Run(dp, func(t *testing.T) {
			spec := upLab(t, "t-savefail-"+short[dp], dp)
			k := kind.Kind(dp)
			ctx := context.Background()
			for _, host := range []string{"flip", "flap"} {
				blocked := change.StatePath(spec.Name, k, host)
				change.SetSaveFault(func(path string) error {
					if path == blocked {
						return errors.New("injected: state not writable")
					}
					return nil
				})
				_, err := lab.Apply(ctx, spec.Name, parse(t, denyAll))
				change.SetSaveFault(nil)
				if err == nil {
					t.Errorf("apply with %s's state unwritable succeeded", host)
				}
				expectStore(t, spec, "after the state of "+host+" could not be saved")
				if _, err := lab.Apply(ctx, spec.Name, parse(t, denyAll)); err != nil {
					t.Fatal(err)
				}
				expectStore(t, spec, "deny-all once the state of "+host+" can be saved")
				if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestStateDirUnwritable replaces the lab's datapath state directory with a
// file: nothing can be read or written there, and the apply must fail
// without changing any host.
func TestStateDirUnwritable(t *testing.T) {
	spec := upLab(t, "t-nodir", "nftables")
	ctx := context.Background()
	dir := filepath.Dir(change.StatePath(spec.Name, kind.NFTables, "flip"))
	aside := dir + ".aside"
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Apply(ctx, spec.Name, parse(t, denyAll)); err == nil {
		t.Error("apply with no state directory succeeded")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(aside, dir); err != nil {
		t.Fatal(err)
	}
	expectStore(t, spec, "after an apply without a state directory")
	if _, err := lab.Apply(ctx, spec.Name, parse(t, denyAll)); err != nil {
		t.Fatal(err)
	}
	expectStore(t, spec, "deny-all with the state directory back")
}

// failingTool puts a fake of tool first on PATH for the test: it refuses
// (exit 1) in the network namespace whose path the file failIn holds, and
// runs the real tool otherwise (and when failIn does not exist).
func failingTool(t *testing.T, tool string) (failIn, real string) {
	t.Helper()
	real, err := exec.LookPath(tool)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	failIn = filepath.Join(bin, "fail-in")
	script := fmt.Sprintf(`#!/bin/sh
if [ -e %[1]s ] && [ "$(stat -L -c %%i /proc/self/ns/net)" = "$(stat -L -c %%i "$(cat %[1]s)")" ]; then
	echo "fake %[2]s: refused" >&2
	exit 1
fi
exec %[3]s "$@"
`, failIn, tool, real)
	if err := os.WriteFile(filepath.Join(bin, tool), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	return failIn, real
}

// TestToolFailsOnOneHost puts a fake of the datapath's tool first on PATH
// that fails in one host's namespace: the apply must fail and leave every
// host on the old policy (the hosts already updated rolled back).
func TestToolFailsOnOneHost(t *testing.T) {
	for _, dp := range []string{"iptables", "nftables"} { // the netfilter datapaths: their tool, their state file per host
		t.Run(dp, func(t *testing.T) {
			spec := upLab(t, "t-toolfail-"+short[dp], dp)
			ctx := context.Background()
			tool := "nft"
			if dp == "iptables" {
				tool, _, _ = spec.IPTables.Tools()
			}
			failIn, _ := failingTool(t, tool)
			if _, err := lab.Apply(ctx, spec.Name, parse(t, denyAll)); err != nil {
				t.Fatal(err)
			}
			for _, h := range spec.Hosts {
				if err := os.WriteFile(failIn, []byte(netns.Path(h.Netns)), 0o644); err != nil {
					t.Fatal(err)
				}
				_, err := lab.Delete(ctx, spec.Name, nil, true, "")
				if err == nil {
					t.Fatalf("delete with %s failing on %s succeeded", tool, h.Name)
				}
				if err := os.Remove(failIn); err != nil {
					t.Fatal(err)
				}
				expectStore(t, spec, tool+" failed on "+h.Name)
			}
			if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
				t.Fatal(err)
			}
			expectStore(t, spec, "deleted with the real "+tool)
		})
	}
}

// allowPort lets namespace x in only on one TCP port, so every x endpoint
// has a policy map (eBPF) with entries.
func allowPort(port int) string {
	return fmt.Sprintf("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: port, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - ports: [{port: %d}]\n", port)
}

// TestInterruptedSwitchTwice kills two eBPF applies in a row after every
// host switched generation and before any state was saved: the active
// generation is then the one the state files name again, with other maps
// in it. Re-applying the stored set must enforce it.
func TestInterruptedSwitchTwice(t *testing.T) {
	spec := upLab(t, "t-intswitch", "ebpf")
	ctx := context.Background()
	targets := []probe.Target{{Protocol: "TCP", Port: 80}, {Protocol: "TCP", Port: 81}}
	if _, err := lab.Apply(ctx, spec.Name, parse(t, allowPort(80))); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		crashAfterKernel(t, "flip", func() {
			_, _ = lab.Apply(ctx, spec.Name, parse(t, allowPort(81)))
		})
	}
	pols, err := lab.Policies(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Apply(ctx, spec.Name, pols); err != nil {
		t.Fatal(err)
	}
	expectStore(t, spec, "port 80 re-applied after two interrupted switches", targets...)
}

// fromNS lets one namespace into namespace x on TCP 80: with peers:
// ipsets, a rule matching the set of that namespace's endpoints.
func fromNS(ns string) string {
	return fmt.Sprintf("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: from-ns, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - from: [{namespaceSelector: {matchLabels: {ns: %s}}}]\n    ports: [{port: 80}]\n", ns)
}

// expectSets fails unless every host holds exactly the cnlab sets its
// rules name, and n rules in all match sets (n < 0: any number).
func expectSets(t *testing.T, spec *topology.Spec, what string, n int) {
	t.Helper()
	_, save, _ := spec.IPTables.Tools()
	rules := 0
	for _, h := range spec.Hosts {
		named, held, r, err := testutil.IPSets(context.Background(), h.Netns, save)
		if err != nil {
			t.Fatal(err)
		}
		rules += r
		if !slices.Equal(named, held) {
			t.Errorf("%s: host %s holds sets %v, its rules name %v", what, h.Name, held, named)
		}
	}
	if n >= 0 && rules != n {
		t.Errorf("%s: %d rules match sets, want %d", what, rules, n)
	}
}

// TestIPSetsFaults breaks applies of the iptables datapath with peers:
// ipsets — killed after one host changed, ipset refusing on one host,
// leftovers planted in the kernel — and checks that the lab enforces the
// stored policies afterwards and every host holds exactly the sets its
// rules name.
func TestIPSetsFaults(t *testing.T) {
	spec := upLab(t, "t-ipsfault", "iptables-ipsets")
	ctx := context.Background()
	// x/a and x/c are on flip, x/b on flap: 3 rules match a set.
	for _, host := range []string{"flip", "flap"} {
		if _, err := lab.Replace(ctx, spec.Name, parse(t, fromNS("y"))); err != nil {
			t.Fatal(err)
		}
		crashAfterKernel(t, host, func() {
			_, _ = lab.Replace(ctx, spec.Name, parse(t, fromNS("z")))
		})
		pols, err := lab.Policies(spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lab.Replace(ctx, spec.Name, pols); err != nil {
			t.Fatalf("re-apply after a crash on %s: %v", host, err)
		}
		expectStore(t, spec, "stored set re-applied after a crash on "+host)
		expectSets(t, spec, "stored set re-applied after a crash on "+host, 3)
		if _, err := lab.Replace(ctx, spec.Name, parse(t, fromNS("z"))); err != nil {
			t.Fatal(err)
		}
		expectStore(t, spec, "new set applied after a crash on "+host)
		expectSets(t, spec, "new set applied after a crash on "+host, 3)
		if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
			t.Fatal(err)
		}
		expectSets(t, spec, "deleted after a crash on "+host, 0)
	}

	// ipset refuses on one host: the change fails and no host changes.
	failIn, real := failingTool(t, "ipset")
	if _, err := lab.Replace(ctx, spec.Name, parse(t, fromNS("y"))); err != nil {
		t.Fatal(err)
	}
	for _, h := range spec.Hosts {
		if err := os.WriteFile(failIn, []byte(netns.Path(h.Netns)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := lab.Replace(ctx, spec.Name, parse(t, fromNS("z"))); err == nil {
			t.Fatalf("apply with ipset failing on %s succeeded", h.Name)
		}
		if err := os.Remove(failIn); err != nil {
			t.Fatal(err)
		}
		expectStore(t, spec, "ipset failed on "+h.Name)
		expectSets(t, spec, "ipset failed on "+h.Name, 3)
	}

	// Leftovers in a host whose state is not trusted: a temporary set of
	// another size under the name the next apply builds in, and a set no
	// rule names. The rebuild removes both.
	if _, err := lab.Replace(ctx, spec.Name, parse(t, fromNS("z"))); err != nil {
		t.Fatal(err)
	}
	flip := spec.Host("flip")
	_, held, _, err := testutil.IPSets(ctx, flip.Netns, "iptables-legacy-save")
	if err != nil || len(held) != 1 {
		t.Fatalf("flip holds %v (%v), want one set", held, err)
	}
	plant := "create " + held[0] + "-new hash:ip maxelem 1024\ncreate cnlab-s-0000000000000000 hash:ip\n"
	if _, err := netns.Run(ctx, flip.Netns, []byte(plant), real, "restore"); err != nil {
		t.Fatal(err)
	}
	statePath := change.StatePath(spec.Name, kind.IPTables, "flip")
	if err := change.MarkDirty(statePath, change.ReadHost(statePath).Sets[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Replace(ctx, spec.Name, parse(t, fromNS("z"))); err != nil {
		t.Fatalf("rebuild over planted sets: %v", err)
	}
	expectStore(t, spec, "rebuilt over planted sets")
	expectSets(t, spec, "rebuilt over planted sets", 3)
	if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
		t.Fatal(err)
	}
	expectSets(t, spec, "all deleted", 0)
}

// failOnce makes the step at point on host fail the first time it is
// reached, and counts how often it was.
func failOnce(point, host string) (hits *int, undo func()) {
	n := 0
	fault.SetHook(func(p, h string) error {
		if p == point && h == host {
			n++
			if n == 1 {
				return errors.New("injected: " + point + " fails on " + host)
			}
		}
		return nil
	})
	return &n, func() { fault.SetHook(nil) }
}

// checkHostsOnStore fails unless status says every host enforces the
// stored set and no change is left.
func checkHostsOnStore(t *testing.T, spec *topology.Spec, what string) {
	t.Helper()
	if p := lab.PolicyState(spec); p == nil || p.Troubled() {
		t.Errorf("%s: status reports %+v, want every host on the stored set and nothing left", what, p)
	}
}

// TestRebuiltHostGetsStoredSet: a change killed after the kernel of host
// flip changed leaves it dirty; the next apply rebuilds it from scratch
// (what it held is not known), then fails on host flap. The rebuilt host
// cannot be rolled back to what it held before; the lab must give it the
// stored set again, and the failed apply must leave no staged set behind.
func TestRebuiltHostGetsStoredSet(t *testing.T) {
	for _, k := range kind.All() {
		dp := string(k)
		t.Run(dp, func(t *testing.T) {
			spec := upLab(t, "t-rebuilt-"+dp[:3], dp)
			ctx := context.Background()
			if _, err := lab.Apply(ctx, spec.Name, parse(t, denyAll)); err != nil {
				t.Fatal(err)
			}
			crashAfterKernel(t, "flip", func() {
				_, _ = lab.Delete(ctx, spec.Name, []string{"x/deny-all"}, false, "")
			})
			point := fault.Dirty
			if dp == "ebpf" {
				point = fault.EBPFSwitch
			}
			hits, undo := failOnce(point, "flap")
			_, err := lab.Apply(ctx, spec.Name, parse(t, allowPort(80)))
			undo()
			if err == nil {
				t.Fatalf("apply with %s failing on flap succeeded", point)
			}
			expectStore(t, spec, "after an apply failed on flap with flip rebuilt", probe.Target{Protocol: "TCP", Port: 80})
			checkHostsOnStore(t, spec, "after the failed apply")
			if *hits < 2 {
				t.Errorf("%s on flap was reached %d times, want a second time by the lab's re-apply of the stored set (the apply said: %v)", point, *hits, err)
			}
			if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestInvalidApplyWritesNothing: a set that does not compile against the
// lab is refused before anything is staged or recorded.
func TestInvalidApplyWritesNothing(t *testing.T) {
	spec := upLab(t, "t-invalid", "iptables")
	bad := strings.Replace(denyAll, "namespace: x", "namespace: nowhere", 1)
	if _, err := lab.Apply(context.Background(), spec.Name, parse(t, bad)); err == nil {
		t.Fatal("an apply into a namespace the lab does not have succeeded")
	}
	checkHostsOnStore(t, spec, "after an apply refused")
}

// crashAt runs f with cnlab "killed" at a fault point on host: the hook
// panics there, and nothing of the change runs after it.
func crashAt(t *testing.T, point, host string, f func()) {
	t.Helper()
	fault.SetHook(func(p, h string) error {
		if p == point && h == host {
			panic(errCrash)
		}
		return nil
	})
	defer fault.SetHook(nil)
	defer func() {
		if r := recover(); r != errCrash {
			if r == nil {
				t.Fatalf("the apply never reached %s on %s", point, host)
			}
			panic(r)
		}
	}()
	f()
}

// Two sets that deny x/a (on flip) -> y/a (on flap) at opposite ends: the
// old one isolates x's egress, the new one y's ingress.
const (
	xEgressClosed = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: x-out, namespace: x}
spec:
  podSelector: {}
  policyTypes: [Egress]
`
	yIngressClosed = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: y-in, namespace: y}
spec:
  podSelector: {}
  policyTypes: [Ingress]
`
)

// TestHostsOnTwoSets pins what docs/limits.md says of a change killed
// between hosts: with flip on the new set and flap on the old, every cell
// is decided by the sender's egress under its host's set and the
// receiver's ingress under its host's set. So x/a -> y/a, which both sets
// deny (at opposite ends), passes. Applying the stored set again ends it.
func TestHostsOnTwoSets(t *testing.T) {
	for _, k := range kind.All() {
		dp := string(k)
		t.Run(dp, func(t *testing.T) {
			spec := upLab(t, "t-twosets-"+dp[:3], dp)
			ctx := context.Background()
			oldSet := parse(t, xEgressClosed)
			if _, err := lab.Apply(ctx, spec.Name, oldSet); err != nil {
				t.Fatal(err)
			}
			// iptables and nftables finish flip before touching flap; eBPF
			// switches flip, then flap.
			point, host := fault.HostDone, "flip"
			if dp == "ebpf" {
				point, host = fault.EBPFSwitch, "flap"
			}
			crashAt(t, point, host, func() {
				_, _ = lab.Replace(ctx, spec.Name, parse(t, yIngressClosed))
			})
			mOld, err := policy.NewModel(spec, oldSet)
			if err != nil {
				t.Fatal(err)
			}
			mNew, err := policy.NewModel(spec, parse(t, yIngressClosed))
			if err != nil {
				t.Fatal(err)
			}
			onHost := map[string]*policy.Model{"flip": mNew, "flap": mOld}
			cells, err := probe.Run(ctx, spec, defaultTargets, probe.Options{Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			crossed := false
			for _, c := range cells {
				src, _ := spec.Endpoint(c.From)
				dst, _ := spec.Endpoint(c.To)
				want := onHost[src.Host].Verdict(src, dst, c.Protocol, c.Port).Egress.Allowed &&
					onHost[dst.Host].Verdict(src, dst, c.Protocol, c.Port).Ingress.Allowed
				if c.Allowed != want {
					t.Errorf("flip on the new set, flap on the old: %s -> %s %s/%d probed allowed=%v, want %v", c.From, c.To, c.Protocol, c.Port, c.Allowed, want)
				}
				if c.From == "x/a" && c.To == "y/a" && c.Allowed &&
					!mOld.Verdict(src, dst, c.Protocol, c.Port).Allowed && !mNew.Verdict(src, dst, c.Protocol, c.Port).Allowed {
					crossed = true
				}
			}
			if !crossed {
				t.Error("x/a -> y/a, denied by both sets, did not pass between a host on each")
			}
			pols, err := lab.Policies(spec.Name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lab.Replace(ctx, spec.Name, pols); err != nil {
				t.Fatal(err)
			}
			expectStore(t, spec, "the stored set applied again")
			checkHostsOnStore(t, spec, "the stored set applied again")
		})
	}
}
