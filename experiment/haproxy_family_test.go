package experiment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHAProxyIPv6Refused: an L7 point with l7Proxy haproxy on a
// netfilter datapath whose traffic is IPv6 because the topology file is
// IPv6-only (or IPv6-primary) and the point sets no ipFamily is refused
// as an ipFamily 6 point is (HAProxy would misjudge it); a topology file
// that says datapath: ebpf, with ipFamily 6, is accepted.
func TestHAProxyIPv6Refused(t *testing.T) {
	dir := t.TempDir()
	v6 := "name: v6\nhosts: [{name: h, podCIDRs: ['fd00:0:192::/64']}]\nendpoints:\n  - {name: client, host: h, labels: {app: client}}\n  - {name: server, host: h, labels: {app: server}}\n"
	v6first := "name: v6f\nhosts: [{name: h, podCIDRs: ['fd00:0:192::/64', 10.0.192.0/24]}]\nendpoints:\n  - {name: client, host: h, labels: {app: client}}\n  - {name: server, host: h, labels: {app: server}}\n"
	ebpf := "name: e\ndatapath: ebpf\nhosts: [{name: h, podCIDRs: [10.0.192.0/24, 'fd00:0:192::/64']}]\nendpoints:\n  - {name: client, host: h, labels: {app: client}}\n  - {name: server, host: h, labels: {app: server}}\n"
	for name, text := range map[string]string{"v6.yaml": v6, "v6first.yaml": v6first, "e.yaml": ebpf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	points := func(src string) error {
		s, err := Parse([]byte(src), filepath.Join(dir, "x.yaml"), false)
		if err == nil {
			_, err = s.Points()
		}
		return err
	}
	for _, topo := range []string{"v6.yaml", "v6first.yaml"} {
		src := "workloads: [{kind: http}]\nmatrix: {topology: [" + topo + "], datapath: [iptables], l7Mode: [http-any], l7Proxy: [haproxy]}\n"
		if err := points(src); err == nil || !strings.Contains(err.Error(), "HAProxy 2.6 reads no IPv6 original destination") {
			t.Errorf("%s, no ipFamily (the point's traffic is IPv6): %v, want the refusal", topo, err)
		}
	}
	src := "workloads: [{kind: http}]\nmatrix: {topology: [e.yaml], l7Mode: [http-any], l7Proxy: [haproxy], ipFamily: [6]}\n"
	if err := points(src); err != nil {
		t.Errorf("topology file with datapath ebpf: %v", err)
	}
}
