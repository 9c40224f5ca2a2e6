package registry

import (
	"errors"
	"slices"
	"testing"

	"github.com/cnlab/cnlab/datapath/kind"
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
