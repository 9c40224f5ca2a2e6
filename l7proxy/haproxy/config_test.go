package haproxy

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/l7"
	"github.com/cnlab/cnlab/l7proxy"
)

// smallConfig is one L7 port with the rule shapes: literal, regexp,
// header, a per-address peer and a CIDR peer.
func smallConfig() *l7proxy.Config {
	a, b, c := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")
	return &l7proxy.Config{Lab: "t", Host: "h1", Set: "s1",
		Identities: map[netip.Addr]uint32{a: 7, b: 8, c: 8},
		Ports: []l7proxy.PortConfig{{Endpoint: "default/server", Addr: a, Port: 80, Peers: []l7proxy.PeerConfig{
			{Identity: 8, Rules: []l7.Rule{
				{Method: "GET", Path: "/public"},
				{Method: "GET|HEAD", Path: "/re/[0-9]+"},
				{Method: "POST", Path: "/h", Headers: []l7.HeaderMatch{{Name: "X-Token", Value: "s3cret"}, {Name: "X-Any"}}},
				{Path: "/it's"},
			}},
			{Identity: 8, Addr: c, Rules: []l7.Rule{{Method: "PUT", Path: "/only-c"}}},
			{CIDR: netip.MustParsePrefix("192.168.0.0/16"), Rules: []l7.Rule{{Method: "GET", Path: "/cidr"}}},
		}}},
	}
}

func TestRenderSmall(t *testing.T) {
	r, err := Render(smallConfig(), "/d", false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := r[ConfigFile]
	for _, want := range []string{
		"bind 0.0.0.0:15001 transparent",
		`http-request set-var(txn.peer) src,map_ip("/d/peers.map")`,
		`http-request allow if { var(txn.key) -m str -f "/d/literals.lst" }`,
		`http-request allow if { var(txn.peer) -m str i8 } { dst 10.0.0.2 } { dst_port 80 } { method -m reg '^(?:GET|HEAD)\z' } { pathq -m reg '^(?:/re/[0-9]+)\z' }`,
		`{ method -m str 'POST' } { pathq -m str '/h' } { req.fhdr(X-Token) -m str 's3cret' } { req.fhdr_cnt(X-Any) ge 1 }`,
		`{ var(txn.peer) -m str c } { src 192.168.0.0/16 } { dst 10.0.0.2 } { dst_port 80 } { method -m str 'GET' } { pathq -m str '/cidr' }`,
		`http-request return status 403 content-type text/plain string "Access denied\r\n"`,
		"http-reuse " + Reuse,
		"server original 0.0.0.0:0",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "ipv6@") {
		t.Errorf("an IPv4 lab's config binds IPv6:\n%s", cfg)
	}
	r6, err := Render(smallConfig(), "/d", true)
	if err != nil || !strings.Contains(r6[ConfigFile], "    bind 0.0.0.0:15001 transparent\n    bind ipv6@:::15001 v6only transparent\n") {
		t.Errorf("a lab with IPv6: no IPv6 listener (%v):\n%s", err, r6[ConfigFile])
	}
	if got, want := r[literalsFile], "a10.0.0.4,10.0.0.2,80,PUT /only-c\ni8,10.0.0.2,80,GET /public\n"; got != want {
		t.Errorf("literals:\n%s\nwant\n%s", got, want)
	}
	if got, want := r[peersFile], "10.0.0.2 i7\n10.0.0.3 i8\n10.0.0.4 i8\n"; got != want {
		t.Errorf("peers:\n%s\nwant\n%s", got, want)
	}
	if got, want := r[addrFile], "10.0.0.4,10.0.0.2,80 a10.0.0.4\n"; got != want {
		t.Errorf("address peers:\n%s\nwant\n%s", got, want)
	}
}

// manyRules is a port with n rules as the experiment's l7Mode rules
// generates them, and one regexp rule.
func manyRules(n int) *l7proxy.Config {
	cfg := smallConfig()
	rules := []l7.Rule{{Method: "GET", Path: "/match"}, {Method: "GET", Path: "/x/.*"}}
	for i := range n - 2 {
		rules = append(rules, l7.Rule{Method: []string{"GET", "POST"}[i%2], Path: fmt.Sprintf("/path%d", i+1)})
	}
	cfg.Ports[0].Peers = append(cfg.Ports[0].Peers, l7proxy.PeerConfig{Identity: 7, Rules: rules})
	return cfg
}

func TestRenderManyRules(t *testing.T) {
	r, err := Render(manyRules(10000), "/d", false)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(r[literalsFile], "\n"); n != 9999+2 {
		t.Errorf("%d literal keys, want 10001", n)
	}
	if n := strings.Count(r[ConfigFile], "http-request allow if "); n != 1+5 {
		t.Errorf("%d allow lines, want 6 (the literal list, 4 other rules, the CIDR peer's)", n)
	}
}

// TestHAProxyAccepts checks with `haproxy -c` that HAProxy loads the
// configurations, 10,000 rules among them, in little time.
func TestHAProxyAccepts(t *testing.T) {
	if err := Check(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	for _, n := range []int{0, 10000} {
		cfg := smallConfig()
		if n > 0 {
			cfg = manyRules(n)
		}
		dir := t.TempDir()
		r, err := Render(cfg, dir, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Write(dir); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		out, err := exec.Command(Binary, "-c", "-f", dir+"/"+ConfigFile).CombinedOutput()
		if err != nil {
			t.Fatalf("%d rules: haproxy -c: %v\n%s\n%s", n, err, out, r[ConfigFile])
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("%d rules: haproxy -c took %s", n, d)
		}
		t.Logf("%d rules: haproxy -c in %s", n, time.Since(t0).Round(time.Millisecond))
	}
}
