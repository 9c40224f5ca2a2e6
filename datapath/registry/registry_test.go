package registry

import (
	"slices"
	"testing"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
)

// Every kind has exactly one implementation, in kind.All's order, and
// nothing else is registered.
func TestEveryKindHasOneImplementation(t *testing.T) {
	var got []kind.Kind
	for _, d := range descriptors() {
		got = append(got, d.Kind)
		if d.New == nil || d.New() == nil {
			t.Errorf("%s: no constructor", d.Kind)
		}
		if (d.Labs == nil) != (d.Cleanup == nil) {
			t.Errorf("%s: Labs and Cleanup must come together", d.Kind)
		}
	}
	if !slices.Equal(got, kind.All()) {
		t.Fatalf("implementations %v, kinds %v", got, kind.All())
	}
	for _, k := range kind.All() {
		if _, err := New(k); err != nil {
			t.Errorf("New(%s): %v", k, err)
		}
		if kind.Get(k) == nil {
			t.Errorf("%s has no descriptor in datapath/kind", k)
		}
	}
	if _, err := New(kind.None); err != datapath.ErrNoHosts {
		t.Errorf("New(none) = %v, want ErrNoHosts", err)
	}
	if _, err := New("bogus"); err == nil {
		t.Error("New(bogus) succeeded")
	}
}

// standIn is a datapath that enforces nothing, for Register's test.
type standIn struct{ datapath.Datapath }

// A registered datapath is listed, constructed and removed with its kind.
func TestRegister(t *testing.T) {
	const k = kind.Kind("stand-in")
	d := datapath.Descriptor{Kind: k, New: func() datapath.Datapath { return standIn{} }}
	remove, err := Register(kind.Descriptor{Kind: k, Summary: "a test's"}, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(k); err != nil || !slices.Contains(kind.All(), k) {
		t.Errorf("New(%s): %v; kinds %v", k, err, kind.All())
	}
	TestEveryKindHasOneImplementation(t)
	if _, err := Register(kind.Descriptor{Kind: k}, d); err == nil {
		t.Error("registered twice")
	}
	if _, err := Register(kind.Descriptor{Kind: "other"}, d); err == nil {
		t.Error("registered an implementation under another kind")
	}
	remove()
	if _, err := New(k); err == nil || slices.Contains(kind.All(), k) {
		t.Errorf("after remove: %v; kinds %v", err, kind.All())
	}
	TestEveryKindHasOneImplementation(t)
}
