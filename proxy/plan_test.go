package proxy

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/cnlab/cnlab/service"
)

var (
	vip = netip.MustParseAddr("10.96.0.10")
	ap1 = netip.MustParseAddrPort("10.0.0.1:53")
	ap2 = netip.MustParseAddrPort("10.0.0.2:53")
)

// A removed backend's flows go (and its node port's); a frontend that
// gains its first backend loses the untranslated flows to it; nothing
// else is touched.
func TestStaleUDP(t *testing.T) {
	have := []UDPFrontend{{VIP: vip, Port: 53, NodePort: 30053, Backends: []netip.AddrPort{ap1, ap2}}}
	want := []UDPFrontend{{VIP: vip, Port: 53, NodePort: 30053, Backends: []netip.AddrPort{ap2}}}
	got := StaleUDP(have, want)
	exp := []StaleFlow{{Dst: vip, DstPort: 53, Backend: ap1.Addr()}, {DstPort: 30053, Backend: ap1.Addr()}}
	if !slices.Equal(got, exp) {
		t.Errorf("removed backend: %v, want %v", got, exp)
	}
	if got := StaleUDP(want, want); len(got) != 0 {
		t.Errorf("no change: %v", got)
	}
	empty := []UDPFrontend{{VIP: vip, Port: 53}}
	gain := []UDPFrontend{{VIP: vip, Port: 53, Backends: []netip.AddrPort{ap1}}}
	if got := StaleUDP(empty, gain); !slices.Equal(got, []StaleFlow{{Dst: vip, DstPort: 53}}) {
		t.Errorf("first backend: %v", got)
	}
	if got := StaleUDP(gain, nil); !slices.Equal(got, []StaleFlow{{Dst: vip, DstPort: 53, Backend: ap1.Addr()}}) {
		t.Errorf("frontend gone: %v", got)
	}
}

// Plan splits a frontend's backends per host: internalTrafficPolicy
// Local for the cluster IP, externalTrafficPolicy Local for the node port.
func TestPlan(t *testing.T) {
	a := service.Backend{Host: "h1", IP: netip.MustParseAddr("10.0.0.1"), Port: 80}
	b := service.Backend{Host: "h2", IP: netip.MustParseAddr("10.0.0.2"), Port: 80}
	tb := &service.Table{Frontends: []service.Frontend{
		{Service: "x/il", Protocol: "tcp", VIP: vip, Port: 80, InternalLocal: true, NodePort: 30000, Backends: []service.Backend{a, b}},
		{Service: "x/el", Protocol: "tcp", VIP: vip, Port: 81, ExternalLocal: true, NodePort: 30001, Backends: []service.Backend{a, b}},
	}}
	p := Plan(tb, "h1")
	if !slices.Equal(p[0].Cluster, []service.Backend{a}) || !slices.Equal(p[0].External, []service.Backend{a, b}) || p[0].SameSets() {
		t.Errorf("internal Local: %+v", p[0])
	}
	if !slices.Equal(p[1].Cluster, []service.Backend{a, b}) || !slices.Equal(p[1].External, []service.Backend{a}) {
		t.Errorf("external Local: %+v", p[1])
	}
	if p[0].ID != "x/il/tcp/80" || p[0].ID == p[1].ID {
		t.Errorf("IDs %q %q", p[0].ID, p[1].ID)
	}
}

// TestDigestCoversEveryField: changing any field of a frontend or of a
// backend changes the digest (a field added to service.Table without a
// line in Digest fails here).
func TestDigestCoversEveryField(t *testing.T) {
	base := func() *service.Table {
		return &service.Table{Frontends: []service.Frontend{{Service: "x/web", PortName: "http", Protocol: "tcp",
			VIP: netip.MustParseAddr("10.96.0.10"), Port: 80, NodePort: 30080, Affinity: 10,
			Backends: []service.Backend{{Endpoint: "x/a", Host: "flip", IP: netip.MustParseAddr("10.0.0.2"), Port: 8080}}}}}
	}
	want := Digest(base())
	change := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Uint16:
			v.SetUint(v.Uint() + 1)
		case reflect.Struct: // netip.Addr
			v.Set(reflect.ValueOf(netip.MustParseAddr("10.96.0.99")))
		case reflect.Slice: // the backends: one more
			v.Set(reflect.Append(v, v.Index(0)))
		default:
			t.Fatalf("no change for a field of kind %s", v.Kind())
		}
	}
	ft := reflect.TypeOf(service.Frontend{})
	for i := range ft.NumField() {
		tb := base()
		change(reflect.ValueOf(&tb.Frontends[0]).Elem().Field(i))
		if Digest(tb) == want {
			t.Errorf("changing Frontend.%s leaves the digest", ft.Field(i).Name)
		}
	}
	bt := reflect.TypeOf(service.Backend{})
	for i := range bt.NumField() {
		tb := base()
		change(reflect.ValueOf(&tb.Frontends[0].Backends[0]).Elem().Field(i))
		if Digest(tb) == want {
			t.Errorf("changing Backend.%s leaves the digest", bt.Field(i).Name)
		}
	}
	if Digest(base()) != want {
		t.Error("the digest of one table differs between two calls")
	}
}
