package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
)

// faultEnv names the fault point where a cnlab run by the tests kills
// itself: POINT or POINT:HOST (internal/fault lists the points). Only the
// test binary reads it.
const faultEnv = "CNLAB_FAULT"

// armFault makes this process SIGKILL itself at the point spec names.
func armFault(spec string) {
	if spec == "" {
		return
	}
	point, host, _ := strings.Cut(spec, ":")
	fault.SetHook(func(p, h string) error {
		if p == point && (host == "" || h == host) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		return nil
	})
}

// killLab: two hosts, two endpoints on each, one of each app per host.
const killLab = `name: %s
hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
  - {name: flap, podCIDR: 10.0.191.0/24}
links:
  - {between: [flip, flap], kind: wire}
endpoints:
  - {name: a1, host: flip, labels: {app: a}}
  - {name: b1, host: flip, labels: {app: b}}
  - {name: a2, host: flap, labels: {app: a}}
  - {name: b2, host: flap, labels: {app: b}}
`

// The policies: a receives only from b; b receives nothing; a also
// receives from a (the next apply after the killed command).
const (
	polAFromB = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-b, namespace: default}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress: [{from: [{podSelector: {matchLabels: {app: b}}}]}]
`
	polBClosed = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-closed, namespace: default}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Ingress]
`
	polAFromA = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-a, namespace: default}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: 80, protocol: TCP}]}]
`
)

// tempWriter returns a function that writes a file of text into dir and
// returns its path, failing the test if it cannot.
func tempWriter(t *testing.T, dir string) func(name, text string) string {
	return func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// A step of a policy change, in the order it runs: a fault point (where
// the killed command dies), or an event that changes what status must
// report: a host marked dirty, a host done (clean, on the new set), the
// new set committed.
type step struct{ point, mark, done string }

const commit = "commit"

// changeSteps lists the steps of a policy change on a lab of hosts flip
// and flap, as the datapath runs them (internal/fault).
func changeSteps(dp string) []step {
	s := []step{{point: fault.Locked}, {point: fault.Staged}}
	hosts := []string{"flip", "flap"}
	if dp == "ebpf" {
		for _, h := range hosts {
			s = append(s, step{point: fault.EBPFMap + ":" + h}, step{point: fault.EBPFStaged + ":" + h})
		}
		for _, h := range hosts {
			s = append(s, step{mark: h}, step{point: fault.Dirty + ":" + h})
		}
		for _, h := range hosts {
			s = append(s, step{point: fault.EBPFSwitch + ":" + h})
		}
		for _, h := range hosts {
			s = append(s, step{point: fault.Kernel + ":" + h}, step{point: fault.Saved + ":" + h}, step{done: h}, step{point: fault.HostDone + ":" + h})
		}
	} else {
		for _, h := range hosts {
			s = append(s, step{mark: h}, step{point: fault.Dirty + ":" + h})
			if dp == "iptables-ipsets" {
				s = append(s, step{point: fault.IPSetsWritten + ":" + h})
			}
			s = append(s, step{point: fault.AtomicLoad + ":" + h},
				step{point: fault.Kernel + ":" + h}, step{point: fault.Saved + ":" + h}, step{done: h}, step{point: fault.HostDone + ":" + h})
		}
	}
	return append(s, step{point: fault.Applied}, step{done: commit}, step{point: fault.Committed})
}

// killedState is what holds once a change is killed at a point: what
// status must say, and whether the new set was stored.
type killedState struct {
	killed    string            // lab.Killed*, "" for no change left
	committed bool              // the store holds the new set
	holds     map[string]string // per host: "stored", "staged", or "dirty"
}

// settled reports whether nothing was left to settle: no change record,
// every host clean on the stored set.
func (k killedState) settled() bool {
	for _, h := range k.holds {
		if h != lab.HoldsStored {
			return false
		}
	}
	return k.killed == ""
}

// afterKill walks the steps up to point.
func afterKill(dp, point string) killedState {
	st := killedState{holds: map[string]string{"flip": lab.HoldsStored, "flap": lab.HoldsStored}}
	for _, s := range changeSteps(dp) {
		switch {
		case s.point == point:
			switch {
			case point == fault.Locked:
			case st.committed:
				st.killed = lab.KilledCommitted
			default:
				st.killed = lab.KilledStaged
			}
			return st
		case s.mark != "":
			st.holds[s.mark] = "dirty"
		case s.done == commit:
			st.committed = true
			for h := range st.holds {
				st.holds[h] = lab.HoldsStored
			}
		case s.done != "":
			st.holds[s.done] = lab.HoldsStaged
		}
	}
	panic("no point " + point)
}

// killStatus is the part of `cnlab status -o json` the kill test reads.
type killStatus struct {
	Policy *struct {
		Stored int
		Staged *struct{ Policies int }
		Change *struct {
			Op      string
			Running bool
			Killed  string
		}
		Hosts []struct {
			Name  string
			Dirty bool
			Holds []string
		}
	}
}

// checkStatus runs `cnlab status` (JSON and text) and compares what it
// says of the lab's policies with want.
func checkStatus(t *testing.T, name, what string, want killedState) {
	t.Helper()
	stdout, stderr, code := runCLI(t, "status", name, "-o", "json")
	var st killStatus
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil || st.Policy == nil {
		t.Fatalf("%s: status -o json: exit %d: %s%s", what, code, stdout, stderr)
	}
	p := st.Policy
	switch {
	case want.killed == "" && p.Change != nil:
		t.Errorf("%s: status reports a change %+v, want none", what, *p.Change)
	case want.killed != "" && (p.Change == nil || p.Change.Running || p.Change.Killed != want.killed):
		t.Errorf("%s: status reports change %+v, want one killed at %q", what, p.Change, want.killed)
	}
	if (p.Staged != nil) != (want.killed == lab.KilledStaged) {
		t.Errorf("%s: status reports staged set %+v", what, p.Staged)
	}
	var dirty []string
	for _, h := range p.Hosts {
		w := want.holds[h.Name]
		switch {
		case w == "dirty":
			dirty = append(dirty, h.Name)
			if !h.Dirty || !slices.Equal(h.Holds, []string{lab.HoldsStored, lab.HoldsStaged}) {
				t.Errorf("%s: status says host %s is dirty=%v holding %v, want dirty holding the stored or the staged set", what, h.Name, h.Dirty, h.Holds)
			}
		case h.Dirty || !slices.Equal(h.Holds, []string{w}):
			t.Errorf("%s: status says host %s is dirty=%v holding %v, want clean on the %s set", what, h.Name, h.Dirty, h.Holds, w)
		}
	}
	text, _, _ := runCLI(t, "status", name)
	phrase := map[string]string{"": "", lab.KilledStaged: "killed between staged and committed",
		lab.KilledCommitted: "killed between committed and cleanup"}[want.killed]
	if !strings.Contains(text, phrase) {
		t.Errorf("%s: status does not say %q:\n%s", what, phrase, text)
	}
	var named []string
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "dirty hosts: "); ok {
			for _, m := range hostInLine.FindAllStringSubmatch(rest, -1) {
				named = append(named, m[1])
			}
		}
	}
	if !slices.Equal(named, dirty) {
		t.Errorf("%s: status names dirty hosts %v, want %v:\n%s", what, named, dirty, text)
	}
}

// hostInLine finds the hosts of status's "dirty hosts: flip (holds ...),
// flap (holds ...)".
var hostInLine = regexp.MustCompile(`(?:^|\), )([a-z0-9-]+) \(`)

// TestKilledApplyAndDelete kills `cnlab policy apply` and `cnlab policy
// delete` (SIGKILL, from inside the process) at every fault point of each
// datapath on a lab of two hosts. After each kill, `cnlab status` must say
// where the change died, which hosts are dirty and which set every other
// host enforces, and the store must hold exactly the set from before the
// change, or the new one once it was committed. Then a killed apply is run
// again, and a killed delete is followed by another apply: either must
// succeed, store what it says, leave status with nothing to report, and
// `cnlab probe --expect` must find the kernel enforcing the stored set on
// every host. `cnlab down` then leaves nothing of the lab.
func TestKilledApplyAndDelete(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	write := tempWriter(t, dir)
	bClosed, aFromA := write("b-closed.yaml", polBClosed), write("a-from-a.yaml", polAFromA)
	setFile := map[string]string{ // the set before a change, in one file
		"a-from-b":          write("before-apply.yaml", polAFromB),
		"a-from-b,b-closed": write("before-delete.yaml", polAFromB+"---\n"+polBClosed),
	}
	start := time.Now()
	// Every kind of the registry, and iptables with peers in ipsets: an
	// option of that kind alone, which adds a step to its changes.
	var dps []string
	for _, k := range kind.All() {
		dps = append(dps, string(k))
		if k == kind.IPTables {
			dps = append(dps, "iptables-ipsets")
		}
	}
	for _, dp := range dps {
		t.Run(dp, func(t *testing.T) {
			name := "t-kill-" + dp[:3]
			up := []string{"up", "--datapath", dp}
			if dp == "iptables-ipsets" {
				name, up = "t-kill-ips", []string{"up", "--datapath", "iptables", "--ipsets"}
			}
			topo := write(name+".yaml", strings.Replace(killLab, "%s", name, 1))
			if _, stderr, code := runCLI(t, append(up, "-f", topo)...); code != 0 {
				t.Fatalf("up: exit %d: %s", code, stderr)
			}
			t.Cleanup(func() { runCLI(t, "down", name) })
			var cases []struct{ op, point string }
			for _, op := range []string{"apply", "delete"} {
				for _, s := range changeSteps(dp) {
					if s.point != "" {
						cases = append(cases, struct{ op, point string }{op, s.point})
					}
				}
			}
			for _, tc := range cases {
				what := tc.op + " killed at " + tc.point
				// apply: {a-from-b} -> killed apply of b-closed, run again.
				// delete: {a-from-b, b-closed} -> killed delete of
				// b-closed, then an apply of a-from-a.
				before, after := []string{"a-from-b"}, []string{"a-from-b", "b-closed"}
				killed := []string{"policy", "apply", name, "-f", bClosed}
				next := killed
				if tc.op == "delete" {
					before, after = after, before
					killed = []string{"policy", "delete", name, "b-closed"}
					next = []string{"policy", "apply", name, "-f", aFromA}
				}
				mustCLI(t, "policy", "delete", name, "--all")
				mustCLI(t, "policy", "apply", name, "-f", setFile[strings.Join(before, ",")])
				cmd := cnlab(killed...)
				cmd.Env = append(cmd.Env, faultEnv+"="+tc.point)
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("%s: not killed (%v): %s", what, err, out)
				}
				want := afterKill(dp, tc.point)
				stored := before
				if want.committed {
					stored = after
				}
				checkStored(t, name, what, stored)
				checkStatus(t, name, what, want)
				if tc.op == "apply" {
					// Without another apply, the next command that uses
					// the lab's traffic settles it on the stored set
					// (lab.Converge) and says so.
					stdout, stderr, code := runCLI(t, "probe", name, "--expect", "--timeout", "300ms")
					if code != 0 {
						t.Errorf("%s, then probe: probe --expect exit %d:\n%s%s", what, code, stdout, stderr)
					}
					if settled := !strings.Contains(stderr, "every host was given the stored policy set"); settled != want.settled() {
						t.Errorf("%s, then probe: the lab was settled=%v, the probe said:\n%s", what, want.settled(), stderr)
					}
					checkStored(t, name, what+", then probe", stored)
					checkStatus(t, name, what+", then probe", killedState{holds: map[string]string{"flip": lab.HoldsStored, "flap": lab.HoldsStored}})
				}
				mustCLI(t, next...)
				if tc.op == "apply" {
					stored = after
				} else {
					stored = withAFromA(stored)
				}
				what += ", then " + strings.Join(next[:2], " ")
				checkStored(t, name, what, stored)
				checkStatus(t, name, what, killedState{holds: map[string]string{"flip": lab.HoldsStored, "flap": lab.HoldsStored}})
				if stdout, stderr, code := runCLI(t, "probe", name, "--expect", "--timeout", "300ms"); code != 0 {
					t.Errorf("%s: probe --expect exit %d:\n%s%s", what, code, stdout, stderr)
				}
			}
			if _, stderr, code := runCLI(t, "down", name); code != 0 {
				t.Fatalf("down: exit %d: %s", code, stderr)
			}
			checkGone(t, name)
		})
	}
	t.Logf("%s", time.Since(start).Round(time.Second))
}

// checkStored compares the lab's stored policy names with want.
func checkStored(t *testing.T, name, what string, want []string) {
	t.Helper()
	pols, err := lab.Policies(name)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, p := range pols {
		have = append(have, p.Name)
	}
	slices.Sort(have)
	if !slices.Equal(have, want) {
		t.Errorf("%s: stored %v, want %v", what, have, want)
	}
}

// checkGone fails if anything of the lab is left: namespaces, bpffs pins,
// its directory or lock under /run/cnlab.
func checkGone(t *testing.T, name string) {
	t.Helper()
	if names, _ := netns.List(topology.LabNetnsPrefix(name)); len(names) != 0 {
		t.Errorf("down left namespaces: %v", names)
	}
	if slices.Contains(registry.Labs(), name) {
		t.Errorf("down left datapath state of %s outside its namespaces (pins)", name)
	}
	for _, p := range []string{filepath.Join(rundir.Dir, name), filepath.Join(rundir.Dir, "."+name+".lock")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("down left %s (%v)", p, err)
		}
	}
}
func withAFromA(names []string) []string {
	out := append([]string{"a-from-a"}, names...)
	slices.Sort(out)
	return out
}

func mustCLI(t *testing.T, args ...string) {
	t.Helper()
	if stdout, stderr, code := runCLI(t, args...); code != 0 {
		t.Fatalf("cnlab %s: exit %d: %s%s", strings.Join(args, " "), code, stdout, stderr)
	}
}

// Two Services of the kill lab: web (app a) before the killed apply, and
// bweb (app b) that the killed apply adds.
const (
	svcWeb = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: a}
  ports: [{port: 80, targetPort: 8080}]
`
	svcBWeb = `apiVersion: v1
kind: Service
metadata: {name: bweb, namespace: default}
spec:
  selector: {app: b}
  ports: [{port: 80, targetPort: 8080}]
`
)

// serviceSteps lists the fault points of a Service apply on the kill lab,
// in order: the lock, the change recorded and staged, then each host as
// change.ApplyHosts changes it, then every host done with the store not
// yet written, then the store committed with the record left.
func serviceSteps() []string {
	s := []string{fault.Locked, fault.Staged}
	for _, h := range []string{"flip", "flap"} {
		for _, p := range []string{fault.Dirty, fault.AtomicLoad, fault.Kernel, fault.Saved, fault.HostDone} {
			s = append(s, p+":"+h)
		}
	}
	return append(s, fault.Applied, fault.Committed)
}

// TestKilledServiceApply kills `cnlab service apply` (SIGKILL, from inside
// the process) at every point of a Service change on each proxy. After each
// kill the store must hold the Services from before (after, once
// committed), and `cnlab status` must say where the change died, which
// hosts are marked dirty (killed while changing them) and which serve a
// set other than the stored one (killed after their kernel took the
// change). The same apply run again must succeed, leave every
// host serving the stored set, and `probe --service --expect` must find
// both Services served as the model says.
func TestKilledServiceApply(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	write := tempWriter(t, dir)
	web, bweb := write("web.yaml", svcWeb), write("bweb.yaml", svcBWeb)
	for _, p := range kind.ServingProxies() {
		px := string(p)
		t.Run(px, func(t *testing.T) {
			name := "t-ksvc-" + px[:3]
			topo := write(name+".yaml", strings.Replace(killLab, "%s", name, 1))
			if _, stderr, code := runCLI(t, "up", "-f", topo, "--datapath", string(p.Home()), "--service-proxy", px); code != 0 {
				t.Fatalf("up: exit %d: %s", code, stderr)
			}
			t.Cleanup(func() { runCLI(t, "down", name) })
			steps := serviceSteps()
			for i, point := range steps {
				what := "service apply killed at " + point
				mustCLI(t, "service", "delete", name, "--all")
				mustCLI(t, "service", "apply", name, "-f", web)
				cmd := cnlab("service", "apply", name, "-f", bweb)
				cmd.Env = append(cmd.Env, faultEnv+"="+point)
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("%s: not killed (%v): %s", what, err, out)
				}
				// What each host holds: dirty from its dirty point to its
				// host-done, then off the stored set.
				want := map[string]string{"flip": "in sync", "flap": "in sync"}
				for _, s := range steps[:i+1] {
					p, h, _ := strings.Cut(s, ":")
					switch p {
					case fault.Dirty:
						want[h] = "dirty"
					case fault.HostDone:
						want[h] = "off"
					}
				}
				stored, killed := []string{"default/web"}, lab.KilledStaged
				switch point {
				case fault.Locked:
					killed = ""
				case fault.Committed:
					stored, killed = []string{"default/bweb", "default/web"}, lab.KilledCommitted
					want = map[string]string{"flip": "in sync", "flap": "in sync"}
				}
				checkServices(t, name, what, stored, killed, want)
				// Without another apply, the next command that uses the
				// lab's traffic settles it on the stored Services.
				settled := killed == "" && want["flip"] == "in sync" && want["flap"] == "in sync"
				_, stderr, code := runCLI(t, "exec", name, "a1", "--", "true")
				if said := strings.Contains(stderr, "every host was given the stored Services"); code != 0 || said == settled {
					t.Errorf("%s, then exec: exit %d, the lab was settled=%v, exec said:\n%s", what, code, settled, stderr)
				}
				checkServices(t, name, what+", then exec", stored, "", map[string]string{"flip": "in sync", "flap": "in sync"})
				mustCLI(t, "service", "apply", name, "-f", bweb)
				what += ", then applied again"
				checkServices(t, name, what, []string{"default/bweb", "default/web"}, "", map[string]string{"flip": "in sync", "flap": "in sync"})
				for _, svc := range []string{"default/web", "default/bweb"} {
					if stdout, stderr, code := runCLI(t, "probe", name, "--service", svc, "--expect", "--timeout", "300ms", "--alpha", "1e-6"); code != 0 {
						t.Errorf("%s: probe --service %s --expect: exit %d:\n%s%s", what, svc, code, stdout, stderr)
					}
				}
			}
			if _, stderr, code := runCLI(t, "down", name); code != 0 {
				t.Fatalf("down: exit %d: %s", code, stderr)
			}
			checkGone(t, name)
		})
	}
}

// checkServices compares the lab's stored Services, where status says the
// change was killed ("" none left) and what it says of each host's proxy
// ("in sync", "dirty" or "off" the stored set) with want, in JSON and in
// text.
func checkServices(t *testing.T, name, what string, stored []string, killed string, want map[string]string) {
	t.Helper()
	svcs, _, err := lab.StoredServices(name)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, s := range svcs {
		have = append(have, s.Key())
	}
	slices.Sort(have)
	if !slices.Equal(have, stored) {
		t.Errorf("%s: stored %v, want %v", what, have, stored)
	}
	stdout, stderr, code := runCLI(t, "status", name, "-o", "json")
	var st struct{ Services *lab.ServicesStatus }
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil || st.Services == nil {
		t.Fatalf("%s: status -o json: exit %d: %s%s", what, code, stdout, stderr)
	}
	if st.Services.Services != len(stored) || len(st.Services.Hosts) != len(want) {
		t.Errorf("%s: status says %d Services stored, hosts %+v", what, st.Services.Services, st.Services.Hosts)
	}
	text, _, _ := runCLI(t, "status", name)
	switch c := st.Services.Change; {
	case killed == "" && (c != nil || st.Services.Staged != nil):
		t.Errorf("%s: status reports a Service change left: %+v, staged %+v", what, c, st.Services.Staged)
	case killed != "" && (c == nil || c.Killed != killed || c.Running):
		t.Errorf("%s: status reports change %+v, want one killed at %s", what, c, killed)
	case (st.Services.Staged != nil) != (killed == lab.KilledStaged):
		t.Errorf("%s: status reports staged Services %+v", what, st.Services.Staged)
	}
	phrase := map[string]string{lab.KilledStaged: "Service change killed between staged and committed",
		lab.KilledCommitted: "Service change killed between committed and cleanup"}[killed]
	if phrase != "" && !strings.Contains(text, phrase) {
		t.Errorf("%s: status does not say %q:\n%s", what, phrase, text)
	}
	for _, h := range st.Services.Hosts {
		got := "in sync"
		switch {
		case h.Dirty:
			got = "dirty"
		case !h.InSync:
			got = "off"
		}
		if got != want[h.Name] {
			t.Errorf("%s: status says host %s is %s, want %s", what, h.Name, got, want[h.Name])
		}
		// A host off the stored set holds the staged one; a dirty one
		// either (or, never having served a Service, one not recorded).
		if got == "off" && !slices.Equal(h.Holds, []string{lab.HoldsStaged}) {
			t.Errorf("%s: status says host %s holds %v, want the staged set", what, h.Name, h.Holds)
		}
		phrase := map[string]string{"dirty": "interrupted on", "off": "not serving the stored Services"}[want[h.Name]]
		if phrase != "" && !strings.Contains(text, phrase) {
			t.Errorf("%s: status does not say %q:\n%s", what, phrase, text)
		}
	}
}
