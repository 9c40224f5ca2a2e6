package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

func TestMain(m *testing.M) {
	registerRefuser() // a fourth datapath, for the tests that iterate the registry (kinds_test.go)
	testutil.Main(m)
}

// The datapaths the kernel tests run on come from the registry: see
// allDatapaths and datapaths (kinds_test.go). "ebpf-legacy" is the eBPF
// datapath with legacy host routing (endpoints on the bridge),
// "iptables-ipsets" the iptables datapath with peers: ipsets.

// short names a datapath in lab names (shortName for any kind).
var short = map[string]string{"iptables": "ipt", "iptables-ipsets": "ips", "nftables": "nft", "ebpf": "ebp", "ebpf-legacy": "ebl", "ebpf-hook": "ebh"}

func scenarioLab(t testing.TB, name, dp, link string) *topology.Spec {
	t.Helper()
	return scenarioLabYAML(t, name, dp, strings.Replace(scenarios.Lab, "kind: wire", "kind: "+link, 1))
}

// scenarioLabYAML is scenarioLab with the lab's topology file given.
func scenarioLabYAML(t testing.TB, name, dp, yaml string) *topology.Spec {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	ov := topology.Overrides{Name: name, Datapath: dp}
	switch dp {
	case "iptables-ipsets":
		testutil.RequireTool(t, "ipset", "ipset")
		ov.Datapath, ov.Options.Peers = "iptables", kind.PeersIPSets
	case "ebpf-legacy":
		ov.Datapath, ov.Options.HostRouting = "ebpf", kind.HostRoutingLegacy
	case "ebpf-hook":
		ov.Datapath, ov.Options.ConnectHook = "ebpf", true
	}
	spec, err := topology.Parse([]byte(yaml), "scenario lab", ov)
	if err != nil {
		t.Fatal(err)
	}
	return upForTest(t, spec)
}

// upForTest brings spec up and takes it down when the test ends.
func upForTest(t testing.TB, spec *topology.Spec) *topology.Spec {
	t.Helper()
	if err := Up(context.Background(), spec, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A test may take its lab down itself: then it is not found.
		if err := Down(spec.Name, nil); err != nil {
			var nf *topology.NotFoundError
			if !errors.As(err, &nf) {
				t.Errorf("down: %v", err)
			}
		}
	})
	return spec
}

func targets() []probe.Target {
	var out []probe.Target
	for _, t := range scenarios.Targets {
		out = append(out, probe.Target{Protocol: t.Protocol, Port: t.Port})
	}
	return out
}

// TestScenarios runs every scenario on every datapath of the registry and
// asserts that the probed matrix, on TCP and UDP, equals the model's, cell
// by cell. The scenarios run one after the other on the same lab, so each
// apply is an incremental change from the previous scenario's policies.
// A datapath that may refuse a policy (kind.Descriptor.MayRefuse, as this
// package's refuser does) must leave the lab as it was when it refuses:
// the matrix is then the model's without the scenario's policies.
func TestScenarios(t *testing.T) {
	for _, dp := range allDatapaths() {
		if dp == "iptables-ipsets" {
			continue // TestIPSetsProbeMatrix runs the scenarios on it beside plain iptables
		}
		mayRefuse := kind.Get(kindOf(dp)).MayRefuse
		for _, link := range []string{"wire", "vxlan"} {
			t.Run(dp+"-"+link, func(t *testing.T) {
				spec := scenarioLab(t, "t-scen-"+shortName(dp)+"-"+link[:2], dp, link)
				refusals := 0
				for i, sc := range scenarios.All {
					if link == "vxlan" && i%3 != 0 {
						continue // the overlay only changes the path: a third of the table
					}
					pols, err := applyScenario(t, spec, sc)
					if err != nil {
						if !mayRefuse {
							t.Fatalf("%s: apply: %v", sc.Name, err)
						}
						// Refused: the lab keeps what it enforced,
						// no policy since the delete. The probe
						// checks that once per lab: a refusal
						// leaves the kernel as the last one did.
						if stored, serr := Policies(spec.Name); serr != nil || len(stored) != 0 {
							t.Fatalf("%s: refused, but the lab stores %d policies (%v)", sc.Name, len(stored), serr)
						}
						if refusals++; refusals > 1 {
							continue
						}
						pols = nil
					}
					checkMatrix(t, sc.Name, spec, pols)
				}
			})
		}
	}
}

// applyScenario replaces the lab's policies with the scenario's: it
// deletes every policy, then applies the scenario's, and returns them
// with the apply's error (a datapath may refuse).
func applyScenario(t *testing.T, spec *topology.Spec, sc scenarios.Scenario) ([]*policy.Policy, error) {
	t.Helper()
	ctx := context.Background()
	if _, err := Delete(ctx, spec.Name, nil, true, ""); err != nil {
		t.Fatalf("%s: delete: %v", sc.Name, err)
	}
	if sc.Policies == "" {
		return nil, nil
	}
	pols, err := policy.Parse([]byte(sc.Policies), sc.Name)
	if err != nil {
		t.Fatalf("%s: %v", sc.Name, err)
	}
	_, err = Apply(ctx, spec.Name, pols)
	return pols, err
}

func checkMatrix(t *testing.T, name string, spec *topology.Spec, pols []*policy.Policy) {
	t.Helper()
	m, err := policy.NewModel(spec, pols)
	if err != nil {
		t.Fatal(err)
	}
	cells, err := probe.Run(context.Background(), spec, targets(), probe.Options{Timeout: 750 * time.Millisecond})
	if err != nil {
		t.Fatalf("%s: probe: %v", name, err)
	}
	bad := 0
	for _, c := range cells {
		src, _ := spec.Endpoint(c.From)
		dst, _ := spec.Endpoint(c.To)
		v := m.Verdict(src, dst, c.Protocol, c.Port)
		if c.Error != "" {
			t.Errorf("%s: %s -> %s %s/%d: %s", name, c.From, c.To, c.Protocol, c.Port, c.Error)
		}
		if c.Allowed != v.Allowed {
			bad++
			if bad <= 6 {
				t.Errorf("%s: %s -> %s %s/%d: probed allowed=%v, model says %v (egress: %s; ingress: %s)",
					name, c.From, c.To, c.Protocol, c.Port, c.Allowed, v.Allowed, v.Egress.Reason, v.Ingress.Reason)
			}
		}
	}
	if bad > 6 {
		t.Errorf("%s: %d cells differ in all", name, bad)
	}
}

func mustParse(t testing.TB, yaml string) []*policy.Policy {
	t.Helper()
	pols, err := policy.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pols
}

const denyYToX = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-x, namespace: x}
spec:
  podSelector: {}
  ingress:
  - from:
    - podSelector: {}
`

// TestUpdatesAreAtomic hammers a pair that the old and the new policy
// both deny with connection attempts while policies change, and checks
// that none got through; and it keeps an allowed connection open across an
// unrelated change and checks that it still carries data.
func TestUpdatesAreAtomic(t *testing.T) {
	for _, dp := range datapaths() {
		t.Run(dp, func(t *testing.T) {
			spec := scenarioLab(t, "t-atomic-"+shortName(dp), dp, "wire")
			ctx := context.Background()
			if _, err := Apply(ctx, spec.Name, mustParse(t, denyYToX)); err != nil {
				t.Fatal(err)
			}
			// An allowed connection x/b -> x/a, kept open.
			xa, _ := spec.Endpoint("x/a")
			xb, _ := spec.Endpoint("x/b")
			srv, err := testutil.ListenEcho(xa.Netns, netip.AddrPortFrom(xa.IP, 9000))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			var conn net.Conn
			if err := netns.Do(xb.Netns, func() error {
				var err error
				conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(xa.IP, 9000).String(), time.Second)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// New connections x/b -> x/a (allowed throughout) must
			// all connect: no change may cut them.
			var allowedTries, allowedFailed atomic.Int64
			var firstFail atomic.Value
			stopAllowed := make(chan struct{})
			var allowedWG sync.WaitGroup
			allowedWG.Add(1)
			go func() {
				defer allowedWG.Done()
				for {
					select {
					case <-stopAllowed:
						return
					default:
					}
					_ = netns.Do(xb.Netns, func() error {
						c, err := net.DialTimeout("tcp", netip.AddrPortFrom(xa.IP, 9000).String(), 2*time.Second)
						allowedTries.Add(1)
						if err != nil {
							allowedFailed.Add(1)
							firstFail.CompareAndSwap(nil, err.Error())
							return nil
						}
						c.Close()
						return nil
					})
					time.Sleep(5 * time.Millisecond)
				}
			}()
			// Hammer y/a -> x/a (denied throughout).
			ya, _ := spec.Endpoint("y/a")
			var passed, tries atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						_ = netns.Do(ya.Netns, func() error {
							c, err := net.DialTimeout("tcp", netip.AddrPortFrom(xa.IP, 9000).String(), 50*time.Millisecond)
							tries.Add(1)
							if err == nil {
								passed.Add(1)
								c.Close()
							}
							return nil
						})
					}
				}()
			}
			// Unrelated and related changes that keep y -> x denied.
			for i := 0; i < 10; i++ {
				other := fmt.Sprintf("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: churn-%d, namespace: z}\nspec:\n  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: y}}\n    ports: [{port: %d}]\n", i, 1000+i)
				if _, err := Apply(ctx, spec.Name, mustParse(t, other)); err != nil {
					t.Fatal(err)
				}
				xPol := fmt.Sprintf("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: x-extra, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns: z}}\n    ports: [{port: %d}]\n", 2000+i)
				if _, err := Apply(ctx, spec.Name, mustParse(t, xPol)); err != nil {
					t.Fatal(err)
				}
				if _, err := Delete(ctx, spec.Name, []string{"x/x-extra"}, false, ""); err != nil {
					t.Fatal(err)
				}
				// Tier changes that keep y -> x denied and x/b -> x/a
				// allowed: an Admin Deny of y moving in priority, an
				// Admin Pass of x's own traffic in front of it, a
				// Baseline default deny of z coming and going.
				if _, err := Apply(ctx, spec.Name, mustParse(t, tierChurn(i))); err != nil {
					t.Fatal(err)
				}
				if i%3 == 2 {
					if _, err := Delete(ctx, spec.Name, []string{"tier-deny-y", "default"}, false, ""); err != nil {
						t.Fatal(err)
					}
				}
			}
			// However fast the updates were, hammer long enough to count.
			for deadline := time.Now().Add(3 * time.Second); tries.Load() < 40 && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			close(stop)
			wg.Wait()
			close(stopAllowed)
			allowedWG.Wait()
			if n := allowedFailed.Load(); n > 0 {
				t.Errorf("%d of %d new connections x/b -> x/a failed while every policy version allowed them (first: %v)", n, allowedTries.Load(), firstFail.Load())
			}
			if tries.Load() < 10 {
				t.Fatalf("only %d attempts made", tries.Load())
			}
			if n := passed.Load(); n > 0 {
				t.Errorf("%d of %d connections y/a -> x/a passed while every policy version denied them", n, tries.Load())
			}
			// The established connection survived the changes.
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := conn.Write([]byte("still here")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 10)
			if _, err := conn.Read(buf); err != nil || string(buf) != "still here" {
				t.Errorf("established connection cut by unrelated changes: %v %q", err, buf)
			}
			// Control: without the policies the hammered pair does connect,
			// so "none passed" above was the policy, not a broken path.
			if _, err := Delete(ctx, spec.Name, nil, true, ""); err != nil {
				t.Fatal(err)
			}
			if err := netns.Do(ya.Netns, func() error {
				c, err := net.DialTimeout("tcp", netip.AddrPortFrom(xa.IP, 9000).String(), 2*time.Second)
				if err == nil {
					c.Close()
				}
				return err
			}); err != nil {
				t.Errorf("y/a cannot reach x/a even with no policy: %v", err)
			}
		})
	}
}

// tierChurn is step i of TestUpdatesAreAtomic's tier changes: every
// version denies y -> x and allows x -> x (the Pass hands x's own
// traffic to the NetworkPolicy only-x, which allows it).
func tierChurn(i int) string {
	return fmt.Sprintf(`apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: tier-deny-y}
spec:
  priority: %d
  subject: {namespaces: {matchLabels: {ns: x}}}
  ingress:
  - {action: Deny, from: [{namespaces: {matchLabels: {ns: y}}}]}
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: tier-pass-x}
spec:
  tier: Admin
  priority: %d
  subject: {namespaces: {matchLabels: {ns: x}}}
  ingress:
  - action: Pass
    from: [{namespaces: {matchLabels: {ns: x}}}]
    protocols: [{tcp: {destinationPort: {number: 9000}}}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {matchLabels: {ns: z}}}
  ingress:
  - {action: Deny, from: [{namespaces: {}}]}
`, 10+i%4, 1+i%3*10)
}

func TestDeleteByName(t *testing.T) {
	spec := scenarioLab(t, "t-delete", "nftables", "wire")
	ctx := context.Background()
	if _, err := Apply(ctx, spec.Name, mustParse(t, denyYToX)); err != nil {
		t.Fatal(err)
	}
	if _, err := Delete(ctx, spec.Name, []string{"x/nope"}, false, ""); err == nil || !strings.Contains(err.Error(), `policy "x/nope" not found in lab t-delete (policies: x/only-x)`) {
		t.Errorf("unknown policy: %v", err)
	}
	ch, err := Delete(ctx, spec.Name, []string{"only-x"}, false, "")
	if err != nil || len(ch.Deleted) != 1 {
		t.Fatalf("delete by bare name: %v %+v", err, ch)
	}
	if pols, _ := Policies(spec.Name); len(pols) != 0 {
		t.Errorf("left: %v", pols)
	}
}

// TestNftablesNewGeneration makes a change that deletes many interval-set
// elements, which the nftables datapath does by building a new generation
// of sets and chains: the matrix must stay right across it.
func TestNftablesNewGeneration(t *testing.T) {
	spec := scenarioLab(t, "t-nftgen", "nftables", "wire")
	ctx := context.Background()
	ranges := func(base int) string {
		var b strings.Builder
		b.WriteString("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: ranges, namespace: x}\nspec:\n  podSelector: {}\n  ingress:\n  - ports:\n")
		for i := 0; i < 40; i++ {
			fmt.Fprintf(&b, "    - {port: %d, endPort: %d}\n", base+10*i, base+10*i+1)
		}
		b.WriteString("    - {port: 80, endPort: 81}\n")
		return b.String()
	}
	for i, base := range []int{1000, 3000, 5000} {
		pols := mustParse(t, ranges(base))
		if _, err := Apply(ctx, spec.Name, pols); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
		var st struct{ Gen int }
		if err := change.LoadState(change.StatePath(spec.Name, kind.NFTables, "flip"), &st); err != nil {
			t.Fatal(err)
		}
		if i > 0 && st.Gen != i {
			t.Errorf("after change %d the generation is %d, want %d", i, st.Gen, i)
		}
		checkMatrix(t, fmt.Sprintf("ranges from %d", base), spec, pols)
	}
}

// TestIPTablesJumpRestored removes FORWARD's jump to CNLAB-FWD by hand on
// one host, where it makes every policy moot, and checks that the next
// apply puts it back (the recorded state is trusted; the jump is checked
// on every apply) and the lab enforces the policies again.
func TestIPTablesJumpRestored(t *testing.T) {
	spec := scenarioLab(t, "t-iptjump", "iptables", "wire")
	ctx := context.Background()
	pols := mustParse(t, denyFromY)
	if _, err := Apply(ctx, spec.Name, pols); err != nil {
		t.Fatal(err)
	}
	_, _, bin := spec.IPTables.Tools()
	flip := spec.Host("flip")
	jump := []string{"FORWARD", "-m", "comment", "--comment", "cnlab policy", "-j", "CNLAB-FWD"}
	if _, err := netns.Run(ctx, flip.Netns, nil, bin, append([]string{"-w", "-D"}, jump...)...); err != nil {
		t.Fatal(err)
	}
	more := mustParse(t, spoofPolicies)
	pols = append(pols, more...)
	if _, err := Apply(ctx, spec.Name, more); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.Run(ctx, flip.Netns, nil, bin, append([]string{"-w", "-C"}, jump...)...); err != nil {
		t.Fatalf("the jump is still missing after an apply: %v", err)
	}
	checkMatrix(t, "after the jump was removed by hand", spec, pols)
}
