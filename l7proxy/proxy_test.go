package l7proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnlab/cnlab/l7"
)

// startProxy runs a proxy on a loopback port whose connections all have
// upstream as their original destination, with cfg as its configuration.
func startProxy(t *testing.T, upstream netip.AddrPort, cfg Config) (dir string, addr string) {
	t.Helper()
	return startProxyWith(t, upstream, cfg, nil)
}

// startProxyWith is startProxy, with a hook called with each request the
// proxy forwards, as it was judged.
func startProxyWith(t testing.TB, upstream netip.AddrPort, cfg Config, forwarding func(l7.Request)) (dir string, addr string) {
	t.Helper()
	dir = t.TempDir()
	writeConfig(t, dir, cfg)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(dir)
	p.forwarding = forwarding
	if err := p.reload(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, p, []net.Listener{ln}, func(c net.Conn) *connInfo {
			return &connInfo{src: c.RemoteAddr().(*net.TCPAddr).AddrPort(), dst: upstream}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy: %v", err)
		}
	})
	for i := 0; ; i++ {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		reply, err := Command(pctx, dir, "ping")
		pcancel()
		if err == nil && reply == "pong" {
			break
		}
		if i == 100 {
			t.Fatalf("the proxy's control socket does not answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return dir, ln.Addr().String()
}

func writeConfig(t testing.TB, dir string, cfg Config) {
	t.Helper()
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// upstream is an HTTP server counting what it receives.
func upstream(t *testing.T) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		fmt.Fprintf(w, "server %s %s host=%s\n", r.Method, r.RequestURI, r.Host)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).AddrPort(), &n
}

// send writes requests on one connection and returns each status and body.
func send(t *testing.T, addr string, reqs ...string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	var out []string
	for _, r := range reqs {
		method, path, _ := strings.Cut(r, " ")
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: web.example\r\n\r\n", method, path)
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, fmt.Sprintf("%d %s", resp.StatusCode, body))
	}
	return out
}

func TestProxyJudgesEachRequestOnOneConnection(t *testing.T) {
	up, received := upstream(t)
	cfg := Config{Set: "s1", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Endpoint: "x/a", Addr: up.Addr(), Port: up.Port(),
			Peers: []PeerConfig{{Identity: 300, Rules: []l7.Rule{{Method: "GET", Path: "/public"}}}}}}}
	dir, addr := startProxy(t, up, cfg)
	got := send(t, addr, "GET /public", "GET /private", "GET /public")
	want := []string{"200 server GET /public host=web.example\n", "403 " + DeniedBody, "200 server GET /public host=web.example\n"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	if n := received.Load(); n != 2 {
		t.Errorf("the server received %d requests, want 2 (the denied one never)", n)
	}
	// A reload swaps the rules in for the next request of the same
	// connection, and is acknowledged with the set's digest.
	cfg.Set = "s2"
	cfg.Ports[0].Peers[0].Rules = []l7.Rule{{Path: "/private"}}
	writeConfig(t, dir, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if reply, err := Command(ctx, dir, "reload"); err != nil || reply != "ok s2" {
		t.Fatalf("reload: %q %v", reply, err)
	}
	got = send(t, addr, "GET /public", "GET /private")
	if !strings.HasPrefix(got[0], "403 ") || !strings.HasPrefix(got[1], "200 ") {
		t.Errorf("after reload: %q", got)
	}
	// The proxy counts a request once its answer is sent, so the client
	// can read the last answer before it is counted: wait for the count.
	st := stats(t, dir)
	for deadline := time.Now().Add(5 * time.Second); st.Requests < 5 && time.Now().Before(deadline); st = stats(t, dir) {
		time.Sleep(10 * time.Millisecond)
	}
	if st.Requests != 5 || st.Allowed != 3 || st.Denied != 2 || st.ByStatus[403] != 2 || st.Set != "s2" {
		t.Errorf("stats %+v", st)
	}
}

func TestProxyReloadKeepsOldPortsWhenAsked(t *testing.T) {
	up, _ := upstream(t)
	cfg := Config{Set: "s1", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{{Identity: 300, Rules: []l7.Rule{{Path: "/a"}}}}}}}
	dir, addr := startProxy(t, up, cfg)
	// The port is no L7 port any more, and L3/L4 isolates nothing.
	writeConfig(t, dir, Config{Set: "s2", L4: &L4Policy{}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Command(ctx, dir, "reload keep"); err != nil {
		t.Fatal(err)
	}
	if got := send(t, addr, "GET /b", "GET /a"); !strings.HasPrefix(got[0], "403 ") || !strings.HasPrefix(got[1], "200 ") {
		t.Errorf("with keep, the old rules (and the old identities) still judge: %q", got)
	}
	if _, err := Command(ctx, dir, "reload"); err != nil {
		t.Fatal(err)
	}
	if got := send(t, addr, "GET /b"); !strings.HasPrefix(got[0], "200 ") {
		t.Errorf("a port that is no L7 port passes when L3/L4 allows the connection: %q", got)
	}
	if _, err := Command(ctx, dir, "frobnicate"); err == nil {
		t.Error("an unknown command is not refused")
	}
}

func TestProxyCIDRPeers(t *testing.T) {
	up, _ := upstream(t)
	// 127.0.0.1 is no endpoint: the CIDR peers covering it add up.
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{
			{CIDR: netip.MustParsePrefix("127.0.0.0/8"), Rules: []l7.Rule{{Path: "/a"}}},
			{CIDR: netip.MustParsePrefix("0.0.0.0/0"), Rules: []l7.Rule{{Path: "/b"}}},
			{CIDR: netip.MustParsePrefix("10.0.0.0/8"), Rules: []l7.Rule{{Path: "/c"}}},
		}}}}
	_, addr := startProxy(t, up, cfg)
	got := send(t, addr, "GET /a", "GET /b", "GET /c")
	if !strings.HasPrefix(got[0], "200 ") || !strings.HasPrefix(got[1], "200 ") || !strings.HasPrefix(got[2], "403 ") {
		t.Errorf("got %q", got)
	}
}

// TestProxyRefusesUnknownDestinations: a connection to a destination that
// no configuration ever made an L7 port (the proxy's own address, reached
// directly) gets 403, never a request forwarded (to itself, say).
func TestProxyRefusesUnknownDestinations(t *testing.T) {
	up, received := upstream(t)
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: netip.MustParseAddr("10.9.9.9"), Port: 80, Peers: []PeerConfig{{Identity: 300, Rules: []l7.Rule{{}}}}}}}
	_, addr := startProxy(t, up, cfg)
	if got := send(t, addr, "GET /"); !strings.HasPrefix(got[0], "403 ") || received.Load() != 0 {
		t.Errorf("got %q, server received %d", got, received.Load())
	}
}

// TestProxyAbsoluteForm: a request-target in absolute form is judged by
// its path and query, as Envoy's :path.
func TestProxyAbsoluteForm(t *testing.T) {
	up, _ := upstream(t)
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{{Identity: 300, Rules: []l7.Rule{{Path: "/public"}}}}}}}
	_, addr := startProxy(t, up, cfg)
	got := send(t, addr, "GET http://web.example/public", "GET http://web.example/private")
	if !strings.HasPrefix(got[0], "200 ") || !strings.HasPrefix(got[1], "403 ") {
		t.Errorf("got %q", got)
	}
}

// TestProxyPerAddressPeers: an endpoint whose rules differ from its
// identity's is judged by its own.
func TestProxyPerAddressPeers(t *testing.T) {
	up, _ := upstream(t)
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{
			{Identity: 300, Rules: []l7.Rule{{Path: "/a"}}},
			{Identity: 300, Addr: netip.MustParseAddr("127.0.0.1"), Rules: []l7.Rule{{Path: "/b"}}},
		}}}}
	_, addr := startProxy(t, up, cfg)
	got := send(t, addr, "GET /a", "GET /b")
	if !strings.HasPrefix(got[0], "403 ") || !strings.HasPrefix(got[1], "200 ") {
		t.Errorf("got %q", got)
	}
}

// TestProxyBothFamilies: one proxy with an IPv4 and an IPv6 listener (as
// Run has) judges each connection by its source's identity in its own
// family and dials the server in that family.
func TestProxyBothFamilies(t *testing.T) {
	ln6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	up4, received4 := upstream(t)
	var from6 atomic.Value
	srv6 := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from6.Store(r.RemoteAddr)
		fmt.Fprintf(w, "server6 %s %s\n", r.Method, r.RequestURI)
	})}
	go srv6.Serve(ln6)
	t.Cleanup(func() { srv6.Close() })
	up6 := ln6.Addr().(*net.TCPAddr).AddrPort()
	rules := []PeerConfig{{Identity: 300, Rules: []l7.Rule{{Method: "GET", Path: "/public"}}}}
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300, netip.MustParseAddr("::1"): 300},
		Ports: []PortConfig{{Endpoint: "x/a", Addr: up4.Addr(), Port: up4.Port(), Peers: rules},
			{Endpoint: "x/a", Addr: up6.Addr(), Port: up6.Port(), Peers: rules}}}
	dir := t.TempDir()
	writeConfig(t, dir, cfg)
	p := newProxy(dir)
	if err := p.reload(false); err != nil {
		t.Fatal(err)
	}
	pl4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, p, []net.Listener{pl4, pl6}, func(c net.Conn) *connInfo {
			src := c.RemoteAddr().(*net.TCPAddr).AddrPort()
			dst := up4
			if src.Addr().Is6() {
				dst = up6
			}
			return &connInfo{src: src, dst: dst}
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy: %v", err)
		}
	}()
	for _, tc := range []struct {
		addr, server string
	}{{pl4.Addr().String(), "server"}, {pl6.Addr().String(), "server6"}} {
		got := send(t, tc.addr, "GET /public", "GET /private")
		if !strings.HasPrefix(got[0], "200 "+tc.server+" GET /public") || got[1] != "403 "+DeniedBody {
			t.Errorf("through %s: %q", tc.addr, got)
		}
	}
	if n := received4.Load(); n != 1 {
		t.Errorf("the IPv4 server received %d requests, want 1", n)
	}
	if a, _ := from6.Load().(string); !strings.HasPrefix(a, "[::1]:") {
		t.Errorf("the IPv6 server's request came from %q, want [::1]", a)
	}
}

// TestProxyEndsWhenEitherListenerFails: a failing IPv6 accept loop ends
// the proxy as an IPv4 one does, rather than leaving IPv6 connections
// hanging on a listener nobody serves while IPv4 goes on.
func TestProxyEndsWhenEitherListenerFails(t *testing.T) {
	ln6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	ln4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeConfig(t, dir, Config{Set: "s"})
	p := newProxy(dir)
	if err := p.reload(false); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- serve(context.Background(), p, []net.Listener{ln4, ln6}, func(net.Conn) *connInfo { return &connInfo{} })
	}()
	time.Sleep(50 * time.Millisecond)
	ln6.Close() // as an accept error would end its loop
	select {
	case err := <-done:
		if err == nil {
			t.Error("serve returned nil after its IPv6 listener failed, want the accept error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve still runs 5 s after its IPv6 listener failed")
	}
	if c, err := net.Dial("tcp4", ln4.Addr().String()); err == nil {
		c.Close()
		t.Error("the IPv4 listener still accepts after the proxy ended")
	}
}
