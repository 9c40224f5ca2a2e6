package observe

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/rundir"
	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

func TestPrefixRoundTrip(t *testing.T) {
	for _, c := range []struct {
		verdict      string
		ingress, dir bool
		id           string
		want         Prefix
	}{
		{Dropped, true, true, RuleID("NetworkPolicy y/a spec.ingress[0]"), Prefix{Dropped, "ingress", RuleID("NetworkPolicy y/a spec.ingress[0]")}},
		{Forwarded, false, true, "-", Prefix{Forwarded, "egress", "-"}},
		{Dropped, false, false, "invalid", Prefix{Dropped, "", "invalid"}},
		{Redirected, true, true, "", Prefix{Redirected, "ingress", "-"}},
	} {
		s := LogPrefix(c.verdict, c.ingress, c.dir, c.id)
		if len(s) > 63 {
			t.Errorf("%q: longer than NFLOG's 63 bytes", s)
		}
		got, ok := ParsePrefix(s + "\x00")
		if !ok || got != c.want {
			t.Errorf("%q: parsed %+v, %v; want %+v", s, got, ok, c.want)
		}
	}
	for _, bad := range []string{"", "cnlab", "cnlab X I -", "cnlab D Q -", "other D I -", "cnlab D I - extra"} {
		if _, ok := ParsePrefix(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if RuleID("a") == RuleID("b") || len(RuleID("a")) != 8 {
		t.Errorf("RuleID: %q %q", RuleID("a"), RuleID("b"))
	}
}

func TestParseOrigin(t *testing.T) {
	for in, want := range map[string]PolicyRef{
		"NetworkPolicy x/allow-web spec.ingress[0]":   {Kind: "NetworkPolicy", Namespace: "x", Name: "allow-web", Rule: "spec.ingress[0]"},
		"AdminNetworkPolicy deny-x spec.egress[1]":    {Kind: "AdminNetworkPolicy", Name: "deny-x", Rule: "spec.egress[1]"},
		"CiliumNetworkPolicy z/c specs[1].ingress[0]": {Kind: "CiliumNetworkPolicy", Namespace: "z", Name: "c", Rule: "specs[1].ingress[0]"},
	} {
		got := ParseOrigin(in)
		if got == nil || *got != want {
			t.Errorf("%q: %+v, want %+v", in, got, want)
		}
		if got.String() != in {
			t.Errorf("%q: String() = %q", in, got.String())
		}
	}
	if ParseOrigin("") != nil || ParseOrigin("x") != nil {
		t.Error("an origin without a name parsed")
	}
}

func flow(from, to, src, dst string, dport uint16, verdict string) *Flow {
	return &Flow{From: from, To: to, SrcIP: src, DstIP: dst, Protocol: "tcp", SrcPort: 40000, DstPort: dport, Verdict: verdict, Type: TypeTrace}
}

func TestFilter(t *testing.T) {
	f := flow("x/a", "y/b", "10.0.1.1", "10.0.2.2", 80, Dropped)
	f.Time = time.Unix(1000, 0)
	for _, c := range []struct {
		flt  Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{From: []string{"x/a"}}, true},
		{Filter{From: []string{"x/"}}, true},
		{Filter{From: []string{"y/"}}, false},
		{Filter{From: []string{"10.0.1.1"}}, true},
		{Filter{From: []string{"10.0.1.0/24"}}, true},
		{Filter{From: []string{"10.0.2.0/24"}}, false},
		{Filter{To: []string{"x/a", "y/b"}}, true}, // alternatives
		{Filter{To: []string{"y/b"}, Verdicts: []string{Forwarded}}, false},
		{Filter{Namespaces: []string{"y"}}, true},
		{Filter{Namespaces: []string{"z"}}, false},
		{Filter{Ports: []uint16{80}}, true},
		{Filter{Ports: []uint16{40000}}, true}, // source port too
		{Filter{Ports: []uint16{81}}, false},
		{Filter{Protocols: []string{"udp"}}, false},
		{Filter{Types: []string{TypeTrace, TypeL7}}, true},
		{Filter{Types: []string{TypeDrop}}, false},
		{Filter{Since: time.Unix(999, 0)}, true},
		{Filter{Since: time.Unix(1001, 0)}, false},
		{Filter{Labeled: map[string]bool{"y/b": true}}, true},
		{Filter{Labeled: map[string]bool{}}, false},
	} {
		if got := c.flt.Match(f); got != c.want {
			t.Errorf("%+v: %v, want %v", c.flt, got, c.want)
		}
	}
	for _, bad := range []Filter{{Verdicts: []string{"denied"}}, {Types: []string{"flow"}}, {Protocols: []string{"tcpp"}}, {From: []string{"nope"}}, {To: []string{""}}} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	if err := (&Filter{From: []string{"x/a", "x/", "10.0.0.0/8", "10.1.1.1"}, Protocols: []string{"47"}}).Check(); err != nil {
		t.Error(err)
	}
}

func TestStoreRotatesAndFollows(t *testing.T) {
	old := rundir.Dir
	rundir.Dir = t.TempDir()
	t.Cleanup(func() { rundir.Dir = old })
	w, err := newWriter(Dir("l"), 2000)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if err := w.Write(flow("x/a", "y/b", "10.0.1.1", "10.0.2.2", uint16(i+1), Forwarded)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(&Lost{Lost: 7, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(Dir("l"), previousFile)); err != nil {
		t.Fatalf("no rotation at 2000 bytes: %v", err)
	}
	var ports []int
	var lost uint64
	end, err := Read("l", func(r Record) error {
		if r.Flow != nil {
			ports = append(ports, int(r.Flow.DstPort))
		}
		if r.Lost != nil {
			lost += r.Lost.Lost
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lost != 7 || len(ports) == 0 || ports[len(ports)-1] != 40 {
		t.Fatalf("read %v, lost %d", ports, lost)
	}
	for i := 1; i < len(ports); i++ {
		if ports[i] != ports[i-1]+1 {
			t.Fatalf("not in order, or a gap: %v", ports)
		}
	}
	// Follow picks up what is written after end, across a rotation.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan int, 100)
	go func() {
		_ = Follow(ctx, "l", end, nil, func(r Record) error {
			if r.Flow != nil {
				got <- int(r.Flow.DstPort)
			}
			return nil
		})
		close(got)
	}()
	for i := 41; i <= 80; i++ {
		_ = w.Write(flow("x/a", "y/b", "10.0.1.1", "10.0.2.2", uint16(i), Forwarded))
		if i%10 == 0 {
			_ = w.Flush()
			time.Sleep(60 * time.Millisecond)
		}
	}
	_ = w.Close()
	want := 41
	for p := range got {
		if p != want {
			t.Fatalf("followed port %d, want %d", p, want)
		}
		if want++; want > 80 {
			cancel()
		}
	}
	if want != 81 {
		t.Fatalf("followed up to %d of 80", want-1)
	}
	// alive's error ends Follow.
	gone := errors.New("gone")
	if err := Follow(context.Background(), "l", Pos{}, func() error { return gone }, func(Record) error { return nil }); !errors.Is(err, gone) {
		t.Fatalf("Follow returned %v", err)
	}
}

// TestNamer names flows with the scenario lab's model: a rule the kernel
// named, an isolated endpoint's default deny, an allow rule, a cluster
// policy's tier, priority and action.
func TestNamer(t *testing.T) {
	spec, err := topology.Parse([]byte(scenarios.Lab), "lab", topology.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	ip := func(id string) string {
		ep, _ := spec.Endpoint(id)
		return ep.IP.String()
	}
	mk := func(pols string) *Namer {
		ps, err := policy.Parse([]byte(pols), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		m, err := policy.NewModel(spec, ps)
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.Compile()
		if err != nil {
			t.Fatal(err)
		}
		return NewNamer(spec, m, c)
	}
	n := mk(scenarios.Named("deny all ingress in x").Policies)
	f := flow("", "", ip("y/a"), ip("x/b"), 80, Dropped)
	f.Reason, f.Direction = ReasonPolicyDenied, "ingress"
	n.Name(f)
	if f.From != "y/a" || f.To != "x/b" || f.Endpoint != "x/b" || f.Policy == nil || f.Policy.String() != "NetworkPolicy x/deny-in spec.ingress" {
		t.Errorf("default deny: %s", Line(f))
	}
	// Allowed where nothing isolates: no policy.
	f = flow("", "", ip("x/b"), ip("y/a"), 80, Forwarded)
	f.Reason, f.Direction = ReasonNotIsolated, "ingress"
	n.Name(f)
	if f.Policy != nil {
		t.Errorf("not isolated: %s", Line(f))
	}
	// The kernel's rule wins over the model.
	f = flow("", "", ip("x/b"), ip("y/a"), 80, Dropped)
	f.Reason, f.Direction, f.Origin = ReasonPolicyDenied, "egress", "NetworkPolicy x/other spec.egress[2]"
	n.Name(f)
	if f.Policy.String() != "NetworkPolicy x/other spec.egress[2]" {
		t.Errorf("kernel's rule: %s", Line(f))
	}
	if n.OriginOf(RuleID("nope")) != "" {
		t.Error("an unknown rule id has an origin")
	}
	// Cluster tiers: the tier, priority and action of the rule.
	for _, sc := range scenarios.All {
		if !strings.Contains(sc.Policies, "AdminNetworkPolicy") {
			continue
		}
		n := mk(sc.Policies)
		for _, c := range sc.Expect {
			if c.Allowed || c.FamilyOf() != 4 { // the lab is IPv4's
				continue
			}
			src, _ := spec.Endpoint(c.From)
			dst, _ := spec.Endpoint(c.To)
			v := n.model.Verdict(src, dst, c.Protocol, c.Port)
			dir, side := "egress", v.Egress
			if side.Allowed {
				dir, side = "ingress", v.Ingress
			}
			if side.Tier == "" || side.Rule == "" {
				continue
			}
			f := flow("", "", src.IP.String(), dst.IP.String(), uint16(c.Port), Dropped)
			f.Protocol, f.Reason, f.Direction = strings.ToLower(c.Protocol), ReasonPolicyDenied, dir
			n.Name(f)
			if f.Policy == nil || f.Policy.Tier != side.Tier || f.Policy.Action == "" || (f.Policy.Kind == policy.KindAdminNP && f.Policy.Priority == nil) {
				t.Errorf("%s: %s -> %s: %s (model: %s)", sc.Name, c.From, c.To, Line(f), side.Reason)
			}
			return
		}
	}
	t.Error("no scenario with an AdminNetworkPolicy deny")
}

func TestSummary(t *testing.T) {
	var s Summary
	for i := 0; i < 3; i++ {
		f := flow("x/a", "y/b", "10.0.1.1", "10.0.2.2", 80, Dropped)
		f.Policy = &PolicyRef{Kind: "NetworkPolicy", Namespace: "y", Name: "deny", Rule: "spec.ingress"}
		f.Time = time.Unix(int64(100+i), 0)
		s.Add(Record{Flow: f})
	}
	s.Add(Record{Flow: flow("", "y/b", "1.1.1.1", "10.0.2.2", 80, Forwarded)})
	s.Add(Record{Lost: &Lost{Lost: 4}})
	s.Done()
	if s.Flows != 4 || s.Lost != 4 || s.Verdicts[Dropped] != 3 || s.Verdicts[Forwarded] != 1 {
		t.Fatalf("%+v", s)
	}
	if len(s.Policies) != 1 || s.Policies[0].Count != 3 || s.Policies[0].Key != "NetworkPolicy y/deny spec.ingress (dropped)" {
		t.Errorf("policies %+v", s.Policies)
	}
	if len(s.Pairs) != 2 || s.Pairs[0].Key != "x/a -> y/b dropped" || s.Pairs[1].Key != "1.1.1.1 -> y/b forwarded" {
		t.Errorf("pairs %+v", s.Pairs)
	}
	var b strings.Builder
	s.Print(&b)
	if !strings.Contains(b.String(), "4 flows") || !strings.Contains(b.String(), "4 lost") {
		t.Errorf("%s", b.String())
	}
}

func TestLine(t *testing.T) {
	f := flow("x/a", "y/b", "10.0.1.1", "10.0.2.2", 80, Dropped)
	f.Host, f.Reason, f.Direction, f.Endpoint, f.TCPFlags = "flip", ReasonPolicyDenied, "ingress", "y/b", "SYN"
	prio := 10
	f.Policy = &PolicyRef{Kind: "AdminNetworkPolicy", Name: "deny", Rule: "spec.ingress[0]", Tier: "Admin", Priority: &prio, Action: "Deny"}
	got := Line(f)
	for _, want := range []string{"flip", "DROPPED", "x/a:40000 -> y/b:80 tcp SYN policy-denied", "ingress of y/b", "[AdminNetworkPolicy deny spec.ingress[0] (Admin, priority 10, Deny)]"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	f = flow("", "", "10.0.1.1", "10.96.0.10", 80, Translated)
	f.SetAddrs(netip.MustParseAddrPort("10.0.1.1:5"), netip.MustParseAddrPort("10.96.0.10:80"), 17)
	f.Service, f.Frontend, f.Backend = "default/web", "10.96.0.10:80", "y/b"
	if got := Line(f); !strings.Contains(got, "10.0.1.1:5 -> 10.96.0.10:80 udp") || !strings.Contains(got, "service default/web (10.96.0.10:80) -> y/b") {
		t.Errorf("%q", got)
	}
	if got := LostLine(&Lost{Lost: 3, Source: "nflog", Host: "flip"}); !strings.Contains(got, "LOST 3 events (nflog on flip)") {
		t.Errorf("%q", got)
	}
}
