package ebpf

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/policy/policytest"
	"github.com/cnlab/cnlab/topology"
)

// records are what the hosts' active generations hold after applying c.
func records(t testing.TB, lab *topology.Spec, c *policy.Compiled) map[string]*genContent {
	plans, err := plan(lab, c)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*genContent{}
	for h, hp := range plans {
		g := &genContent{IPCache: hp.IPCache}
		for _, ep := range hp.Endpoints {
			g.Slots = append(g.Slots, slotContent{ID: ep.ID, Identity: ep.Identity, Enforce: ep.Enforce, Entries: ep.Entries})
		}
		out[h] = g
	}
	return out
}

// checkChange checks that planChange from one compiled set to another
// gives plan's answer, when it gives one; it returns whether it did.
func checkChange(t *testing.T, name string, lab *topology.Spec, from, to *policy.Compiled) bool {
	t.Helper()
	want, wantErr := plan(lab, to)
	got, ok, err := planChange(lab, from, to, records(t, lab, from))
	if !ok {
		return false
	}
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%s: planChange error %v, plan error %v", name, err, wantErr)
	}
	for h, hp := range want {
		g := got[h]
		if !reflect.DeepEqual(g.IPCache, hp.IPCache) || g.L7 != hp.L7 || len(g.Endpoints) != len(hp.Endpoints) {
			t.Fatalf("%s: host %s differs", name, h)
		}
		for i, e := range hp.Endpoints {
			ge := g.Endpoints[i]
			if len(ge.Entries) == 0 && len(e.Entries) == 0 {
				ge.Entries, e.Entries = nil, nil
			}
			if !reflect.DeepEqual(ge, e) {
				t.Fatalf("%s: host %s endpoint %s: got %d entries (enforce %v), want %d (%v)", name, h, e.ID, len(ge.Entries), ge.Enforce, len(e.Entries), e.Enforce)
			}
		}
	}
	return true
}

// TestPlanChangeScenarios: from every scenario to every other, the
// patched plan is the plan.
func TestPlanChangeScenarios(t *testing.T) {
	lab, err := topology.Parse([]byte(scenarios.Lab), "scenario lab", topology.Overrides{Datapath: "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	cs := []*policy.Compiled{policytest.CompileOn(t, lab, "")}
	for _, s := range scenarios.All {
		cs = append(cs, policytest.CompileOn(t, lab, s.Policies))
		// The scenario with each of its policies left out.
		docs := strings.Split(s.Policies, "---\n")
		for i := range docs {
			if len(docs) > 1 {
				rest := append(append([]string{}, docs[:i]...), docs[i+1:]...)
				cs = append(cs, policytest.CompileOn(t, lab, strings.Join(rest, "---\n")))
			}
		}
	}
	patched := 0
	for i, from := range cs {
		for j, to := range cs {
			if checkChange(t, fmt.Sprintf("%d -> %d", i, j), lab, from, to) {
				patched++
			}
		}
	}
	t.Logf("%d of %d changes patched", patched, len(cs)*len(cs))
	if patched < len(cs)*len(cs)/2 {
		t.Errorf("only %d of %d changes patched", patched, len(cs)*len(cs))
	}
}

// TestPlanChangeScale: the changes of BenchmarkPolicyScale and their kin
// (a port moved, a policy removed, added, duplicated, a range) on many
// policies.
func TestPlanChangeScale(t *testing.T) {
	lab, err := topology.Parse([]byte(scenarios.Lab), "bench", topology.Overrides{Datapath: "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	pol := func(name, port string) string {
		return fmt.Sprintf("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: %s, namespace: x}\nspec:\n  podSelector: {matchLabels: {app: web}}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n      podSelector: {matchLabels: {pod: c}}\n    ports: [%s]\n---\n", name, port)
	}
	set := func(n int, extra map[int]string) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			port := fmt.Sprintf("{port: %d}", 10000+2*i)
			if p, ok := extra[i]; ok {
				port = p
			}
			if port != "" {
				b.WriteString(pol(fmt.Sprintf("p%d", i), port))
			}
		}
		return b.String()
	}
	base := set(200, nil)
	variants := map[string]string{
		"moved":        set(200, map[int]string{0: "{port: 9990}"}),
		"moved-middle": set(200, map[int]string{100: "{port: 9990}"}),
		"removed":      set(200, map[int]string{7: ""}),
		"added":        base + pol("zz", "{port: 9990}"),
		"duplicate":    base + pol("aa", "{port: 10000}") + pol("zz", "{port: 10002}"),
		"dup-moved":    set(200, map[int]string{0: "{port: 10002}"}),
		"range":        set(200, map[int]string{3: "{port: 9000, endPort: 9100}"}),
		"any-port":     set(200, map[int]string{5: "{protocol: TCP}"}),
		"udp":          set(200, map[int]string{9: "{port: 10018, protocol: UDP}"}),
	}
	c0 := policytest.CompileOn(t, lab, base)
	cv := map[string]*policy.Compiled{"base": c0}
	for name, y := range variants {
		cv[name] = policytest.CompileOn(t, lab, y)
	}
	for a, from := range cv {
		for b, to := range cv {
			if !checkChange(t, a+" -> "+b, lab, from, to) {
				t.Errorf("%s -> %s: not patched", a, b)
			}
		}
	}
}

// TestRuleEq checks that ruleEq compares rules as == does, field by
// field (a field added to policy.Entry must be added to ruleEq), and
// whatever origins it remembers.
func TestRuleEq(t *testing.T) {
	base := policy.Entry{Subject: 1, Dir: policy.Ingress, PeerID: 2, Proto: 6, PortLo: 80, PortHi: 81, Origin: "x/p0 ingress[0]"}
	typ := reflect.TypeOf(base)
	for i := 0; i < typ.NumField(); i++ {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Uint8, reflect.Uint16, reflect.Uint32:
			f.SetUint(f.Uint() + 1)
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Struct: // PeerCIDR
			f.Set(reflect.ValueOf(netip.MustParsePrefix("10.0.0.0/8")))
		default:
			t.Fatalf("policy.Entry.%s: a kind TestRuleEq does not know (%s): check ruleEq", typ.Field(i).Name, f.Kind())
		}
		var q ruleEq
		if q.equal(&base, &other) || base == other {
			t.Errorf("policy.Entry.%s differs, ruleEq says equal (or the test did not change it)", typ.Field(i).Name)
		}
	}
	// Origins equal in content, then one remembered that differs.
	var q ruleEq
	a, b := base, base
	a.Origin, b.Origin = strings.Clone(base.Origin), strings.Clone(base.Origin)
	if !q.equal(&a, &b) || !q.equal(&a, &b) {
		t.Fatal("equal rules compare unequal")
	}
	long := a.Origin + " and more"
	c, d := a, b
	c.Origin, d.Origin = long, strings.Clone(b.Origin+" and mork")
	if q.equal(&c, &d) {
		t.Fatal("different origins compare equal")
	}
}
