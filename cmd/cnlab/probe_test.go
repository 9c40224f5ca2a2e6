package main

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// The matrix says that rows are senders and columns receivers: a denied
// a->b and an allowed b->a must land in the right cells.
func TestPrintMatrixSaysRowsAreSenders(t *testing.T) {
	spec := &topology.Spec{Endpoints: []topology.Endpoint{{Namespace: "x", Name: "a"}, {Namespace: "x", Name: "b"}}}
	no := false
	cells := []probe.Cell{
		{From: "x/a", To: "x/b", Allowed: false, Expected: &no},
		{From: "x/b", To: "x/a", Allowed: true, Expected: &no},
	}
	var b bytes.Buffer
	printMatrix(&b, spec, cells, "tcp", 80)
	want := `tcp/80 from\to x/a x/b
x/a            .   ✗
x/b            ✓*  .
rows: from (sender), columns: to (receiver); ✓ allowed  ✗ denied  * differs from the policy model
`
	if b.String() != want {
		t.Errorf("matrix:\n%s\nwant:\n%s", b.String(), want)
	}
}

// A lab with two families prints one matrix per family, titled with it.
func TestPrintMatrixPerFamily(t *testing.T) {
	spec := &topology.Spec{
		Hosts:     []topology.Host{{Name: "h", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")}}},
		Endpoints: []topology.Endpoint{{Namespace: "x", Name: "a"}, {Namespace: "x", Name: "b"}},
	}
	cells := []probe.Cell{
		{From: "x/a", To: "x/b", Family: 4, Allowed: true},
		{From: "x/b", To: "x/a", Family: 4, Allowed: true},
		{From: "x/a", To: "x/b", Family: 6, Allowed: false},
		{From: "x/b", To: "x/a", Family: 6, Allowed: true},
	}
	var b bytes.Buffer
	printMatrix(&b, spec, cells, "tcp", 80)
	want := `IPv4 tcp/80 from\to x/a x/b
x/a                 .   ✓
x/b                 ✓   .

IPv6 tcp/80 from\to x/a x/b
x/a                 .   ✗
x/b                 ✓   .
rows: from (sender), columns: to (receiver); ✓ allowed  ✗ denied  * differs from the policy model
`
	if b.String() != want {
		t.Errorf("matrix:\n%s\nwant:\n%s", b.String(), want)
	}
}

// probe --http prints one matrix per family too.
func TestPrintHTTPMatrixPerFamily(t *testing.T) {
	spec := &topology.Spec{
		Hosts:     []topology.Host{{Name: "h", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")}}},
		Endpoints: []topology.Endpoint{{Namespace: "x", Name: "a"}, {Namespace: "x", Name: "b"}},
	}
	st := func(n int) *int { return &n }
	cells := []probe.Cell{
		{From: "x/a", To: "x/b", Family: 4, Status: st(200)},
		{From: "x/b", To: "x/a", Family: 4, Status: st(403)},
		{From: "x/a", To: "x/b", Family: 6, Status: st(0)},
		{From: "x/b", To: "x/a", Family: 6, Status: st(403)},
	}
	var b bytes.Buffer
	printHTTPMatrix(&b, spec, cells, probe.HTTPRequest{Method: "GET", Path: "/p"}, 80)
	want := `IPv4 GET /p :80 from\to x/a x/b
x/a                     .   200
x/b                     403 .

IPv6 GET /p :80 from\to x/a x/b
x/a                     .   -
x/b                     403 .
rows: from (sender), columns: to (receiver); status received, - no connection, * differs from the policy model
`
	if b.String() != want {
		t.Errorf("matrix:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestParseFamily(t *testing.T) {
	for in, want := range map[string]int{"": 0, "both": 0, "4": 4, "6": 6} {
		if got, err := parseFamily(in); err != nil || got != want {
			t.Errorf("parseFamily(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseFamily("5"); err == nil {
		t.Error("parseFamily(5) did not fail")
	}
}
