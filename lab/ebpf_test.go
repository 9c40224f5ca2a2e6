package lab

import (
	"os"
	"path/filepath"

	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	ciliumebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/change"
	"github.com/cnlab/cnlab/internal/fault"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

// dial connects from an endpoint and reports the error and how long it took.
func dial(t testing.TB, from *topology.Endpoint, to netip.AddrPort, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	var took time.Duration
	err := netns.Do(from.Netns, func() error {
		start := time.Now()
		c, err := net.DialTimeout("tcp", to.String(), timeout)
		took = time.Since(start)
		if err == nil {
			c.Close()
		}
		return err
	})
	return took, err
}

// TestMonitorShowsDrops watches the verdict events while a denied and an
// allowed connection are tried: the drop is reported with its endpoints,
// identities, port and reason; the allowed flow is not reported as a drop,
// and is reported with --type all.
func TestMonitorShowsDrops(t *testing.T) {
	spec := scenarioLab(t, "t-monitor", "ebpf", "wire")
	ctx := context.Background()
	if _, err := Apply(ctx, spec.Name, mustParse(t, denyYToX)); err != nil {
		t.Fatal(err)
	}
	_, m, err := Model(spec.Name, false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	xa, _ := spec.Endpoint("x/a")
	xc, _ := spec.Endpoint("x/c")
	yb, _ := spec.Endpoint("y/b")
	for _, level := range []uint32{ebpf.MonitorDrops, ebpf.MonitorAll} {
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		events := make(chan ebpf.Event, 1000)
		done := make(chan error, 1)
		started := make(chan struct{})
		go func() {
			done <- ebpf.Monitor(mctx, spec, level, c.Rules, func() { close(started) }, func(ev ebpf.Event) error {
				events <- ev
				return nil
			})
		}()
		// Dial once the lease is written (started): the programs report
		// nothing before.
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("monitor: %v", err)
		}
		if _, err := dial(t, yb, netip.AddrPortFrom(xa.IP, 80), 300*time.Millisecond); err == nil {
			t.Fatal("y/b -> x/a connected through a deny")
		}
		if _, err := dial(t, xc, netip.AddrPortFrom(xa.IP, 80), 2*time.Second); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("x/c -> x/a: %v", err)
		}
		// The events reach the reader within its poll (50 ms): wait for
		// those wanted, up to 5 s, and 500 ms at least (an allowed flow
		// wrongly reported at level drops has that long to show).
		var got []ebpf.Event
		wanted := func() bool {
			var drop, allowed bool
			for _, ev := range got {
				drop = drop || ev.From == "y/b" && ev.To == "x/a"
				allowed = allowed || ev.From == "x/c" && ev.To == "x/a"
			}
			return drop && (allowed || level != ebpf.MonitorAll)
		}
		least, most := time.After(500*time.Millisecond), time.After(5*time.Second)
	wait:
		for {
			select {
			case ev := <-events:
				got = append(got, ev)
			case <-least:
				least = nil
			case <-most:
				break wait
			}
			if least == nil && wanted() {
				break wait
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("monitor: %v", err)
		}
		close(events)
		for ev := range events {
			got = append(got, ev)
		}
		var drop, allowed bool
		for _, ev := range got {
			if ev.From == "y/b" && ev.To == "x/a" && ev.Dst.Port() == 80 {
				if ev.Verdict != "dropped" || ev.Reason != "policy-default-deny" || ev.Direction != "ingress" || ev.Endpoint != "x/a" ||
					ev.SrcIdentity != m.IdentityOf("y/b").ID || ev.DstIdentity != m.IdentityOf("x/a").ID || ev.Protocol != "tcp" {
					t.Errorf("drop event wrong: %+v", ev)
				}
				drop = true
			}
			if ev.From == "x/c" && ev.To == "x/a" {
				if ev.Verdict != "allowed" {
					t.Errorf("allowed flow reported as %+v", ev)
				}
				if ev.Verdict == "allowed" && ev.Reason == "policy-allow" && !strings.Contains(ev.Rule, "x/only-x") {
					t.Errorf("allowed event names rule %q, want one of x/only-x", ev.Rule)
				}
				allowed = true
			}
		}
		if !drop {
			t.Errorf("level %d: no drop event for y/b -> x/a", level)
		}
		if allowed != (level == ebpf.MonitorAll) {
			t.Errorf("level %d: allowed flow reported=%v", level, allowed)
		}
	}
	// The counters saw the drop too.
	d, err := Describe(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d["flip"], "policy-default-deny") {
		t.Errorf("describe shows no drop counter:\n%s", d["flip"])
	}
}

// TestConnectHook: with the socket-level hook, a connect that the policy
// denies on its own host fails at once with ECONNREFUSED instead of timing
// out; the probe still sees the model's matrix.
func TestConnectHook(t *testing.T) {
	spec := scenarioLab(t, "t-hook", "ebpf-hook", "wire")
	ctx := context.Background()
	pols := mustParse(t, denyYToX)
	if _, err := Apply(ctx, spec.Name, pols); err != nil {
		t.Fatal(err)
	}
	checkMatrix(t, "deny y to x", spec, pols)
	xa, _ := spec.Endpoint("x/a")
	yb, _ := spec.Endpoint("y/b") // same host as x/a
	took, err := dial(t, yb, netip.AddrPortFrom(xa.IP, 80), 5*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("y/b -> x/a: %v after %v, want connection refused", err, took)
	}
	if took > time.Second {
		t.Errorf("refusal took %v", took)
	}
	// Loopback, the unspecified address (Linux connects it to loopback)
	// and the endpoint's own address are not policy decisions: an
	// egress-isolated endpoint still reaches itself.
	egress := mustParse(t, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: dns-only, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - ports: [{port: 53, protocol: UDP}]\n")
	if _, err := Apply(ctx, spec.Name, egress); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ listen, to netip.Addr }{
		{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1")},
		{netip.MustParseAddr("127.0.0.1"), netip.IPv4Unspecified()},
		{xa.IP, xa.IP},
	} {
		srv, err := testutil.ListenEcho(xa.Netns, netip.AddrPortFrom(l.listen, 9100))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dial(t, xa, netip.AddrPortFrom(l.to, 9100), 2*time.Second); err != nil {
			t.Errorf("x/a -> %s with egress isolation: %v", l.to, err)
		}
		srv.Close()
	}
	if _, err := dial(t, xa, netip.AddrPortFrom(yb.IP, 80), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("x/a -> y/b with egress isolation: %v, want refused", err)
	}
	// Scenarios with egress rules and CIDRs, decided at the socket too.
	for _, sc := range scenarios.All[:12] {
		if _, err := Delete(ctx, spec.Name, nil, true, ""); err != nil {
			t.Fatal(err)
		}
		var pols []*policy.Policy
		if sc.Policies != "" {
			if pols, err = policy.Parse([]byte(sc.Policies), sc.Name); err != nil {
				t.Fatal(err)
			}
			if _, err := Apply(ctx, spec.Name, pols); err != nil {
				t.Fatal(err)
			}
		}
		checkMatrix(t, sc.Name, spec, pols)
	}
}

// dialSock6 connects from an endpoint with an AF_INET6 socket, as dial,
// to any IPv6 address: IPv4-mapped ones too, which Go's dialer sends
// over IPv4 sockets.
func dialSock6(t testing.TB, from *topology.Endpoint, to netip.AddrPort, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	var took time.Duration
	err := netns.Do(from.Netns, func() error {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		tv := unix.NsecToTimeval(timeout.Nanoseconds()) // a blocking connect's limit
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			return err
		}
		start := time.Now()
		err = unix.Connect(fd, &unix.SockaddrInet6{Addr: to.Addr().As16(), Port: int(to.Port())})
		took = time.Since(start)
		return err
	})
	return took, err
}

// TestConnectHookDualStack is TestConnectHook over both families of a
// dual-stack lab: a denied IPv6 connect is refused at once and reported
// by the monitor as the connect hook's; an allowed one connects; an
// IPv4-mapped destination on an IPv6 socket (which leaves as IPv4) is
// judged as IPv4; loopback and the endpoint's own addresses pass; the
// probe sees the model's matrix in both families.
func TestConnectHookDualStack(t *testing.T) {
	spec := familyLab(t, "t-hook-ds", "ebpf-hook", 4, 6)
	ctx := context.Background()
	pols := mustParse(t, denyYToX)
	if _, err := Apply(ctx, spec.Name, pols); err != nil {
		t.Fatal(err)
	}
	checkMatrixFamilies(t, "deny y to x", spec, pols)
	xa, _ := spec.Endpoint("x/a")
	xc, _ := spec.Endpoint("x/c") // allowed, same host
	yb, _ := spec.Endpoint("y/b") // denied, same host
	a4, _ := xa.Addr(4)
	a6, _ := xa.Addr(6)
	mapped := netip.AddrFrom16(a4.As16()) // ::ffff:10.0.192.10
	for _, a := range []netip.Addr{a4, a6} {
		srv, err := testutil.ListenEcho(xa.Netns, netip.AddrPortFrom(a, 9000))
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
	}
	// The monitor sees the IPv6 refusal as the connect hook's.
	_, m, err := Model(spec.Name, false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	events := make(chan ebpf.Event, 1000)
	done := make(chan error, 1)
	go func() {
		done <- ebpf.Monitor(mctx, spec, ebpf.MonitorDrops, c.Rules, nil, func(ev ebpf.Event) error {
			events <- ev
			return nil
		})
	}()
	time.Sleep(300 * time.Millisecond) // the lease is written before Monitor reads
	for _, to := range []netip.AddrPort{netip.AddrPortFrom(a6, 9000), netip.AddrPortFrom(a4, 9000)} {
		took, err := dial(t, yb, to, 5*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("y/b -> %s: %v after %v, want connection refused", to, err, took)
		} else if took > time.Second {
			t.Errorf("y/b -> %s: refusal took %v", to, took)
		}
		if _, err := dial(t, xc, to, 2*time.Second); err != nil {
			t.Errorf("x/c -> %s (allowed): %v", to, err)
		}
	}
	// An IPv4-mapped destination leaves as IPv4 (connect4 is not
	// called): judged as IPv4, refused at once where IPv4 is.
	to := netip.AddrPortFrom(mapped, 9000)
	if took, err := dialSock6(t, yb, to, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) || took > time.Second {
		t.Errorf("y/b -> %s on an IPv6 socket: %v after %v, want connection refused at once", to, err, took)
	}
	if _, err := dialSock6(t, xc, to, 2*time.Second); err != nil {
		t.Errorf("x/c -> %s on an IPv6 socket (allowed): %v", to, err)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("monitor: %v", err)
	}
	close(events)
	seen := false
	for ev := range events {
		if ev.Dst == netip.AddrPortFrom(a6, 9000) {
			yb6, _ := yb.Addr(6)
			if ev.At != "connect" || ev.From != "y/b" || ev.To != "x/a" || ev.Src.Addr() != yb6 || ev.Verdict != "dropped" ||
				ev.Reason != "policy-default-deny" || ev.Direction != "ingress" || ev.Endpoint != "x/a" ||
				ev.SrcIdentity != m.IdentityOf("y/b").ID || ev.DstIdentity != m.IdentityOf("x/a").ID || ev.Protocol != "tcp" {
				t.Errorf("IPv6 drop event wrong: %+v", ev)
			}
			seen = true
		}
	}
	if !seen {
		t.Error("no drop event for y/b -> x/a over IPv6")
	}
	// Loopback, the unspecified address (Linux connects it to loopback)
	// and the endpoint's own addresses pass an egress-isolated endpoint;
	// other endpoints are refused, in each family and IPv4-mapped.
	egress := mustParse(t, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: dns-only, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - ports: [{port: 53, protocol: UDP}]\n")
	if _, err := Apply(ctx, spec.Name, egress); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ listen, to netip.Addr }{
		{netip.MustParseAddr("::1"), netip.MustParseAddr("::1")},
		{netip.MustParseAddr("::1"), netip.IPv6Unspecified()},
		{a6, a6},
		{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::ffff:127.0.0.1")},
		{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::ffff:0.0.0.0")},
		{a4, mapped},
	} {
		srv, err := testutil.ListenEcho(xa.Netns, netip.AddrPortFrom(l.listen, 9100))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dialSock6(t, xa, netip.AddrPortFrom(l.to, 9100), 2*time.Second); err != nil {
			t.Errorf("x/a -> %s with egress isolation: %v", l.to, err)
		}
		srv.Close()
	}
	b4, _ := yb.Addr(4)
	b6, _ := yb.Addr(6)
	for _, to := range []netip.Addr{b6, netip.AddrFrom16(b4.As16())} {
		if took, err := dialSock6(t, xa, netip.AddrPortFrom(to, 80), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) || took > time.Second {
			t.Errorf("x/a -> %s with egress isolation: %v after %v, want refused at once", to, err, took)
		}
	}
	// Scenarios with egress rules and CIDRs of both families.
	for _, sc := range scenarios.All {
		switch sc.Name {
		case "deny all egress in x", "egress to an IPv6 ipBlock", "ipBlocks of both families",
			"egress of the source and ingress of the destination both needed":
		default:
			continue
		}
		pols, err := applyScenario(t, spec, sc)
		if err != nil {
			t.Fatalf("%s: apply: %v", sc.Name, err)
		}
		checkMatrixFamilies(t, sc.Name, spec, pols)
	}
}

// TestPolicyMapFull: a policy that does not fit an endpoint's policy map
// is refused at apply time with the numbers, and the policy in force stays
// as it was; too many endpoints for a host fail `up` cleanly.
func TestPolicyMapFull(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	yaml := scenarios.Lab + "ebpf: {policyMapSize: 4}\n"
	spec, err := topology.Parse([]byte(yaml), "small.yaml", topology.Overrides{Name: "t-mapfull", Datapath: "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Up(ctx, spec, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Down(spec.Name, nil) })
	small := mustParse(t, denyYToX) // x/* ingress from x: 3 entries each
	if _, err := Apply(ctx, spec.Name, small); err != nil {
		t.Fatal(err)
	}
	// x/a from the 3 endpoints of x on 2 ports: 6 entries, with only-x's 3.
	big := mustParse(t, "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: big, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - podSelector: {}\n    ports: [{port: 1}, {port: 2}]\n")
	_, err = Apply(ctx, spec.Name, big)
	if err == nil || !strings.Contains(err.Error(), "endpoint x/a needs 9 policy map entries, but its policy map holds 4 (raise ebpf.policyMapSize") {
		t.Fatalf("apply of an oversized policy: %v", err)
	}
	pols, err := Policies(spec.Name)
	if err != nil || len(pols) != 1 || pols[0].Name != "only-x" {
		t.Errorf("stored policies after the refused apply: %v %v", pols, err)
	}
	checkMatrix(t, "after refused apply", spec, small)

	// Too many endpoints for a host is refused before anything is built.
	_, err = topology.Parse([]byte(scenarios.Lab+"ebpf: {maxEndpoints: 1}\n"), "one.yaml", topology.Overrides{Name: "t-maxep", Datapath: "ebpf"})
	if err == nil || !strings.Contains(err.Error(), "one.yaml: ebpf.maxEndpoints: host flip has 5 endpoints, more than 1") {
		t.Fatalf("too many endpoints: %v", err)
	}
}

// TestEBPFReload: setting the datapath up again over a running lab
// replaces every program through its tcx link (new program IDs), keeps the
// maps (the policy stays enforced) and traffic keeps flowing.
func TestEBPFReload(t *testing.T) {
	spec := scenarioLab(t, "t-reload", "ebpf", "wire")
	ctx := context.Background()
	pols := mustParse(t, denyYToX)
	if _, err := Apply(ctx, spec.Name, pols); err != nil {
		t.Fatal(err)
	}
	progs := func() map[string]uint32 {
		out := map[string]uint32{}
		for _, h := range spec.Hosts {
			dir := filepath.Join(ebpf.HostDir(spec.Name, h.Name), "links")
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				l, err := link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil)
				if err != nil {
					t.Fatal(err)
				}
				info, err := l.Info()
				l.Close()
				if err != nil {
					t.Fatal(err)
				}
				out[h.Name+"/"+e.Name()] = uint32(info.Program)
			}
		}
		return out
	}
	before := progs()
	// Two per endpoint, and one per link end (cnlab_from_wire).
	if want := 2*len(spec.Endpoints) + 2*len(spec.Links); len(before) != want {
		t.Fatalf("%d links pinned for %d endpoints and %d links, want %d", len(before), len(spec.Endpoints), len(spec.Links), want)
	}
	if err := ebpf.New().Setup(ctx, spec); err != nil {
		t.Fatal(err)
	}
	after := progs()
	for k, id := range before {
		if after[k] == 0 || after[k] == id {
			t.Errorf("%s: program %d before, %d after the reload", k, id, after[k])
		}
	}
	checkMatrix(t, "after reload", spec, pols)
}

// TestMonitorEndsWithLab: a monitor whose lab is taken down stops with
// ErrLabGone instead of watching dead maps (and holding them) forever.
func TestMonitorEndsWithLab(t *testing.T) {
	testutil.RequireRoot(t)
	spec, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t-mon-gone", Datapath: "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Up(ctx, spec, UpOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done <- ebpf.Monitor(ctx, spec, ebpf.MonitorDrops, nil, func() { close(started) }, func(ebpf.Event) error { return nil })
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("monitor: %v", err)
	}
	if err := Down(spec.Name, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ebpf.ErrLabGone) {
			t.Errorf("monitor ended with %v, want ErrLabGone", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("monitor still running 5 s after its lab went down")
	}
}

// TestEBPFUpdateFailsHalfWay makes the eBPF datapath's apply fail where a
// map update can fail: building the second host's next generation (after
// the first host's was built), and switching the second host's generation
// (after the first host switched). Either way the apply fails, no host is
// left on the new policy (the first host is switched back), the stored set
// is the old one, and the next apply goes through.
func TestEBPFUpdateFailsHalfWay(t *testing.T) {
	spec := scenarioLab(t, "t-ebpf-half", "ebpf", "wire")
	ctx := context.Background()
	old := mustParse(t, denyFromY)
	if _, err := Apply(ctx, spec.Name, old); err != nil {
		t.Fatal(err)
	}
	next := mustParse(t, spoofPolicies)
	injected := errors.New("injected map update failure")
	for _, point := range []string{"ebpf-staged", "ebpf-switch"} {
		fault.SetHook(func(p, host string) error {
			if p == point && host == "flap" {
				return injected
			}
			return nil
		})
		_, err := Apply(ctx, spec.Name, next)
		fault.SetHook(nil)
		if !errors.Is(err, injected) {
			t.Fatalf("%s on flap: apply returned %v, want the injected failure", point, err)
		}
		stored, err := Policies(spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(stored) != len(old) {
			t.Errorf("%s on flap: %d policies stored after the failed apply, want the %d of before", point, len(stored), len(old))
		}
		checkMatrix(t, point+" failed on flap", spec, old)
	}
	if _, err := Apply(ctx, spec.Name, next); err != nil {
		t.Fatal(err)
	}
	checkMatrix(t, "the next apply", spec, append(old, next...))
}

// TestEBPFUpdatesInPlace applies the scenario table's policies one after
// another with no delete between them: each apply edits the inactive
// generation's maps in place from the record of what they hold, so no
// pinned map is ever replaced by another (only slots that had none get
// one), and the probe matches the model after every apply. Then the
// records are lost or damaged: the generations are rebuilt, as correctly.
func TestEBPFUpdatesInPlace(t *testing.T) {
	spec := scenarioLab(t, "t-inplace", "ebpf", "wire")
	ctx := context.Background()
	// pinned maps every map pin of both generations to its map ID.
	pinned := func() map[string]uint32 {
		out := map[string]uint32{}
		for _, h := range spec.Hosts {
			for _, gen := range []string{"gen0", "gen1"} {
				root := filepath.Join(ebpf.HostDir(spec.Name, h.Name), gen)
				err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
					if err != nil || d.IsDir() {
						return err
					}
					m, err := ciliumebpf.LoadPinnedMap(path, nil)
					if err != nil {
						return err
					}
					defer m.Close()
					info, err := m.Info()
					if err != nil {
						return err
					}
					id, _ := info.ID()
					out[path] = uint32(id)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		return out
	}
	var before map[string]uint32
	for i, sc := range scenarios.All {
		var pols []*policy.Policy
		if sc.Policies != "" {
			pols = mustParse(t, sc.Policies)
		}
		var err error
		if len(pols) == 0 {
			_, err = Delete(ctx, spec.Name, nil, true, "")
		} else {
			_, err = Replace(ctx, spec.Name, pols)
		}
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		if i%4 == 0 {
			checkMatrix(t, sc.Name, spec, pols)
		}
		after := pinned()
		for path, id := range before {
			if a, ok := after[path]; ok && a != id {
				t.Errorf("%s: %s is map %d, was %d: the apply made a new map instead of editing it", sc.Name, path, a, id)
			}
		}
		before = after
	}
	if len(before) == 0 {
		t.Fatal("no policy map pinned under gen0/ or gen1/")
	}
	// Lost and damaged records: the generations are rebuilt.
	for _, h := range spec.Hosts {
		state := strings.TrimSuffix(change.StatePath(spec.Name, kind.EBPF, h.Name), ".json")
		if err := os.Remove(state + ".gen0"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(state+".gen1", []byte("cnlab-ebpf-gen 1\ngarbage"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"deny all ingress in x", "allow from the same namespace", "deny all both ways in x"} {
		pols := mustParse(t, scenarios.Named(name).Policies)
		if _, err := Replace(ctx, spec.Name, pols); err != nil {
			t.Fatalf("%s after the records were lost: %v", name, err)
		}
		checkMatrix(t, name+" after the records were lost", spec, pols)
	}
}
