package registry

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/service"
)

// Every proxy kind but none has exactly one implementation, in
// kind.Proxies' order, and nothing else is registered.
func TestEveryProxyHasOneImplementation(t *testing.T) {
	var got, want []kind.Proxy
	for _, d := range descriptors() {
		got = append(got, d.Kind)
		if d.New == nil || d.New() == nil {
			t.Errorf("%s: no constructor", d.Kind)
		}
		if d.StateKind == "" || slices.Contains(kind.All(), d.StateKind) {
			t.Errorf("%s: state kind %q is empty or a policy datapath's", d.Kind, d.StateKind)
		}
	}
	for _, p := range kind.Proxies() {
		if p != kind.ProxyNone {
			want = append(want, p)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("implementations %v, proxy kinds %v", got, want)
	}
	for _, p := range want {
		if _, err := New(p); err != nil {
			t.Errorf("New(%s): %v", p, err)
		}
	}
	if _, err := New(kind.ProxyNone); !errors.Is(err, ErrNone) {
		t.Errorf("New(none) = %v, want ErrNone", err)
	}
	if _, err := New("bogus"); err == nil {
		t.Error("New(bogus) succeeded")
	}
}

// TestProxiesServeIPv6: every proxy serves IPv6 frontends (the ebpf
// proxy refused them before its IPv6 maps).
func TestProxiesServeIPv6(t *testing.T) {
	v6 := &service.Table{Frontends: []service.Frontend{{Service: "x/web", VIP: netip.MustParseAddr("10.96.0.2")}, {Service: "x/web", VIP: netip.MustParseAddr("fd00:96::2")}}}
	for _, p := range []kind.Proxy{kind.ProxyIPTables, kind.ProxyNFTables, kind.ProxyEBPF} {
		if err := CheckFamilies(p, v6); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
