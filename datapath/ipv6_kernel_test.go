package datapath_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
)

// v6Policy isolates x/a's ingress and allows x/b and x/c on TCP 8080.
const v6Policy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-c, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchExpressions: [{key: pod, operator: In, values: [b, c]}]}}]
    ports: [{port: 8080, protocol: TCP}]
`

// upFile brings up examples/FILE under another name with datapath dp.
func upFile(t *testing.T, file, name, dp string) *topology.Spec {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip6tables-legacy-restore", "iptables")
	testutil.RequireTool(t, "nft", "nftables")
	data, err := os.ReadFile("../examples/" + file)
	if err != nil {
		t.Fatal(err)
	}
	ov := topology.Overrides{Name: name, Datapath: dp}
	if dp == "iptables-ipsets" {
		testutil.RequireTool(t, "ipset", "ipset")
		ov.Datapath, ov.Options.Peers = "iptables", kind.PeersIPSets
	}
	spec, err := topology.Parse(data, file, ov)
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Up(context.Background(), spec, lab.UpOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(spec.Name, nil); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	return spec
}

// listen serves TCP port in an endpoint's namespace (both families),
// accepting and closing connections until the test ends.
func listen(t *testing.T, ep *topology.Endpoint, port int) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(ep.Netns, func() (err error) {
		ln, err = net.Listen("tcp", ":"+strconv.Itoa(port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// connects reports whether a TCP connection from an endpoint's namespace
// to addr:port is established.
func connects(t *testing.T, from *topology.Endpoint, addr netip.Addr, port int) bool {
	t.Helper()
	ok := false
	if err := netns.Do(from.Netns, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, uint16(port)).String(), time.Second)
		if err == nil {
			ok = true
			c.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ok
}

func endpoint(t *testing.T, spec *topology.Spec, id string) *topology.Endpoint {
	t.Helper()
	for i := range spec.Endpoints {
		if spec.Endpoints[i].ID() == id {
			return &spec.Endpoints[i]
		}
	}
	t.Fatalf("no endpoint %s", id)
	return nil
}

// TestIPv6PolicyIPTables applies a NetworkPolicy on the iptables datapath
// (addresses and ipsets) in a dual-stack and in an IPv6-only lab and makes
// real TCP connections over each family of the lab, from endpoints of
// x/a's host (bridged: the bridge port table and ip6tables' FORWARD see
// them) and of the other host (routed): before the policy every endpoint
// reaches x/a, after it x/b and x/c alone; deleting the policy opens x/a
// again.
func TestIPv6PolicyIPTables(t *testing.T) {
	const port = 8080
	for _, tc := range []struct{ file, short string }{{"dual-stack.yaml", "ds"}, {"ipv6-only.yaml", "v6"}} {
		for _, dp := range []string{"iptables", "iptables-ipsets"} {
			t.Run(tc.short+"/"+dp, func(t *testing.T) {
				spec := upFile(t, tc.file, "t-h6i-"+tc.short+map[string]string{"iptables": "ipt", "iptables-ipsets": "ips"}[dp], dp)
				checkPolicyBothFamilies(t, spec, port)
			})
		}
	}
}

// checkPolicyBothFamilies has x/c, y/b (x/a's host) and x/b, y/a (the
// other host) connect to x/a's port over each family of the lab: all
// connect with no policy, only x's with v6Policy, all again once it is
// deleted.
func checkPolicyBothFamilies(t *testing.T, spec *topology.Spec, port int) {
	t.Helper()
	ctx := context.Background()
	a := endpoint(t, spec, "x/a")
	listen(t, a, port)
	check := func(what string, policy bool) {
		t.Helper()
		for _, fam := range spec.Families() {
			dst, _ := a.Addr(fam)
			for _, from := range []string{"x/c", "x/b", "y/b", "y/a"} {
				want := !policy || from[0] == 'x'
				if got := connects(t, endpoint(t, spec, from), dst, port); got != want {
					t.Errorf("%s: %s -> x/a %s: connected=%v, want %v", what, from, dst, got, want)
				}
			}
		}
	}
	check("no policy", false)
	if _, err := lab.Apply(ctx, spec.Name, parse(t, v6Policy)); err != nil {
		t.Fatal(err)
	}
	check("policy applied", true)
	if _, err := lab.Delete(ctx, spec.Name, nil, true, ""); err != nil {
		t.Fatal(err)
	}
	check("policy deleted", false)
}
