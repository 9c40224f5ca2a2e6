package datapath_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/datapath/registry"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// observeLab is one host, four endpoints: x/a isolated on ingress, which
// x/b may reach on TCP 80, x/c is denied by a CiliumNetworkPolicy, x/d
// meets x/a's default deny.
const observeLab = `hosts:
  - {name: flip, podCIDR: 10.0.192.0/24}
namespaces:
  x: {labels: {ns: x}}
endpoints:
  - {name: a, namespace: x, host: flip, ip: 10.0.192.10, labels: {pod: a}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}]}
  - {name: b, namespace: x, host: flip, ip: 10.0.192.11, labels: {pod: b}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}]}
  - {name: c, namespace: x, host: flip, ip: 10.0.192.12, labels: {pod: c}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}]}
  - {name: d, namespace: x, host: flip, ip: 10.0.192.13, labels: {pod: d}, ports: [{name: serve-80-tcp, port: 80, protocol: TCP}]}
`

const observePolicies = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-b, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{port: 80}]
---
apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: deny-c, namespace: x}
spec:
  endpointSelector: {matchLabels: {pod: a}}
  ingressDeny:
  - fromEndpoints: [{matchLabels: {pod: c}}]
    toPorts: [{ports: [{port: "80", protocol: TCP}]}]
`

// TestObserveKernel runs the log rules and rule counters of each
// netfilter datapath on a real lab: it applies a policy with observe off
// and keeps the kernel's rules, switches the running lab to drops (an
// apply with the new level), probes (x/b -> x/a allowed; x/c denied by a
// deny rule, x/d by the default deny), and checks that the deny rule's
// log rule and the default drop's matched, that RuleCounters names the
// deny rule and the default deny of x/a with packets, then switches to
// all (the allow's log rule matches too) and back to off: no log rule
// left, the rules exactly those of before. After down, the lab's
// namespaces, and the rules in them, are gone.
func TestObserveKernel(t *testing.T) {
	for _, dp := range []string{"iptables", "iptables-ipsets", "nftables"} {
		t.Run(dp, func(t *testing.T) {
			testutil.RequireRoot(t)
			testutil.RequireTool(t, "iptables-legacy-restore", "iptables")
			testutil.RequireTool(t, "nft", "nftables")
			name := "h-nfrules-" + map[string]string{"iptables": "ipt", "iptables-ipsets": "ips", "nftables": "nft"}[dp]
			ov := topology.Overrides{Name: name, Datapath: dp}
			if dp == "iptables-ipsets" {
				testutil.RequireTool(t, "ipset", "ipset")
				ov.Datapath, ov.Options.Peers = "iptables", kind.PeersIPSets
			}
			spec, err := topology.Parse([]byte(observeLab), "observe lab", ov)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := lab.Up(ctx, spec, lab.UpOptions{}); err != nil {
				t.Fatal(err)
			}
			down := func() error { return lab.Down(spec.Name, nil) }
			t.Cleanup(func() {
				var nf *topology.NotFoundError
				if err := down(); err != nil && !errors.As(err, &nf) {
					t.Errorf("down: %v", err)
				}
			})
			ch, err := lab.Apply(ctx, spec.Name, parse(t, observePolicies))
			if err != nil {
				t.Fatal(err)
			}
			c := ch.Compiled
			var denyOrigin, allowOrigin string
			for _, e := range c.Rules {
				if e.Deny {
					denyOrigin = e.Origin
				} else {
					allowOrigin = e.Origin
				}
			}
			d, err := registry.New(spec.Datapath)
			if err != nil {
				t.Fatal(err)
			}
			h := spec.Hosts[0]
			listing := func() string {
				t.Helper()
				var out []byte
				var err error
				if dp == "nftables" { // the tables one by one: the ruleset lists them in the order they were made
					out, err = netns.Run(ctx, h.Netns, nil, "nft", "list", "table", "inet", "cnlab")
					if err == nil {
						var ports []byte
						ports, err = netns.Run(ctx, h.Netns, nil, "nft", "list", "table", "bridge", "cnlab")
						out = append(out, ports...)
					}
				} else {
					_, save, _ := spec.IPTables.Tools()
					out, err = netns.Run(ctx, h.Netns, nil, save, "-c")
				}
				if err != nil {
					t.Fatal(err)
				}
				return string(out)
			}
			// The rules as observe off has them, counters and
			// iptables-save's dates left out (nftables goes back to
			// generation 0).
			norm := func(s string) string {
				for _, re := range []string{`\[\d+:\d+\]`, `packets \d+ bytes \d+`, `(?m)^#.*$`} {
					s = regexp.MustCompile(re).ReplaceAllString(s, "")
				}
				return s
			}
			before := norm(listing())
			level := func(l string) {
				t.Helper()
				at := *spec
				at.Observe = l
				if err := d.Apply(ctx, &at, c); err != nil {
					t.Fatalf("apply with observe %s: %v", l, err)
				}
			}
			probeA := func() {
				t.Helper()
				cells, err := probe.Run(ctx, spec, []probe.Target{{Protocol: "TCP", Port: 80}}, probe.Options{Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				for _, cl := range cells {
					if cl.To == "x/a" && cl.Allowed != (cl.From == "x/b") {
						t.Errorf("%s -> x/a: allowed %v", cl.From, cl.Allowed)
					}
				}
			}
			// logged returns the packets a log rule with this prefix
			// counted (-1: no such rule).
			logged := func(text, prefix string) int {
				n := -1
				for _, line := range strings.Split(text, "\n") {
					if !strings.Contains(line, `"`+prefix+`"`) {
						continue
					}
					n = max(n, 0)
					m := regexp.MustCompile(`^\[(\d+):|counter packets (\d+)`).FindStringSubmatch(line)
					if m != nil {
						k, _ := strconv.Atoi(m[1] + m[2])
						n += k
					}
				}
				return n
			}

			level(topology.ObserveDrops)
			probeA()
			text := listing()
			denyPrefix := observe.LogPrefix(observe.Dropped, true, true, observe.RuleID(denyOrigin))
			defaultPrefix := observe.LogPrefix(observe.Dropped, true, true, "-")
			if dp == "nftables" {
				denyPrefix = defaultPrefix // one rule per verdict class
			}
			for _, p := range []string{denyPrefix, defaultPrefix} {
				if n := logged(text, p); n <= 0 {
					t.Errorf("observe drops: the log rule %q counted %d packets:\n%s", p, n, text)
				}
			}
			if strings.Contains(text, "cnlab F ") {
				t.Errorf("observe drops logs forwarded flows:\n%s", text)
			}
			counters, err := d.(datapath.RuleCounterer).RuleCounters(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			found := map[string]uint64{}
			for _, rc := range counters {
				if rc.Endpoint == "x/a" && rc.Direction == "ingress" {
					found[rc.Rule+" "+rc.Verdict] += rc.Packets
				}
			}
			for _, want := range []string{denyOrigin + " deny", datapath.DefaultDenyRule + " default-deny", allowOrigin + " allow"} {
				if found[want] == 0 {
					t.Errorf("RuleCounters: no packets for x/a's %q: %+v", want, counters)
				}
			}

			level(topology.ObserveAll)
			probeA()
			text = listing()
			allowPrefix := observe.LogPrefix(observe.Forwarded, true, true, observe.RuleID(allowOrigin))
			if dp == "nftables" {
				allowPrefix = observe.LogPrefix(observe.Forwarded, true, true, "-")
			}
			for _, p := range []string{denyPrefix, allowPrefix, observe.LogPrefix(observe.Forwarded, false, false, "-")} {
				if n := logged(text, p); n <= 0 {
					t.Errorf("observe all: the log rule %q counted %d packets:\n%s", p, n, text)
				}
			}

			level(topology.ObserveOff)
			text = listing()
			if strings.Contains(text, "NFLOG") || strings.Contains(text, "log group") || strings.Contains(text, "log_") || strings.Contains(text, "counter\n") {
				t.Errorf("observe off leaves a log rule or counter:\n%s", text)
			}
			if after := norm(text); after != before {
				t.Errorf("observe off after drops and all:\n%s\nbefore:\n%s", after, before)
			}

			if err := down(); err != nil {
				t.Fatal(err)
			}
			for _, h := range spec.Hosts {
				if _, err := os.Stat(filepath.Join("/run/netns", h.Netns)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("after down, host %s's namespace %s: %v", h.Name, h.Netns, err)
				}
			}
		})
	}
}
