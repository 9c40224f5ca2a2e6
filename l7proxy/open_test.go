package l7proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/l7"
)

// TestProxyForwardsTheTargetItJudged: a request-target holding a byte Go's
// URL encoder escapes is forwarded as received (or refused with 400),
// never decoded and escaped again: the rule below allows the first target
// because it holds no '/' or '.' after /public/, and the server must not
// receive /public/../private/x%7B/.. instead.
func TestProxyForwardsTheTargetItJudged(t *testing.T) {
	up, received := upstream(t)
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{{Identity: 300, Rules: []l7.Rule{{Method: "GET", Path: `/public/[^/.]*`}}}}}}}
	_, addr := startProxy(t, up, cfg)
	for _, target := range []string{
		"/public/%2e%2e%2fprivate%2fx{%2f%2e%2e",
		"/public/%2E%2E%2Fprivate%2Fx|",
		"/public/a%2fb\"c",
		"/public/x^%5C",
		"/public/\xc3\xa9%2f%2e%2e",
		"/public/x%7b",
		"/public/plain",
	} {
		before := received.Load()
		got := send(t, addr, "GET "+target)[0]
		want := "200 server GET " + target + " host=web.example\n"
		switch {
		case strings.HasPrefix(got, "400 "):
			if received.Load() != before {
				t.Errorf("GET %q: 400, but the server received it", target)
			}
		case got != want:
			t.Errorf("GET %q: the rules judged %q, the server answered %q", target, target, got)
		}
	}
}

// TestProxyHalfClosedClient: a client that sends an allowed request and
// shuts its sending side down gets the server's answer, as it would
// without the proxy.
func TestProxyHalfClosedClient(t *testing.T) {
	up, _ := upstream(t)
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{{Identity: 300, Rules: []l7.Rule{{Path: "/public"}}}}}}}
	_, addr := startProxy(t, up, cfg)
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		for i := range 20 { // the race between the EOF and the upstream call is won most times
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "GET /public %s\r\nHost: web.example\r\n\r\n", proto)
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				c.Close()
				t.Fatalf("%s, attempt %d: %v", proto, i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			c.Close()
			if resp.StatusCode != 200 || string(body) != "server GET /public host=web.example\n" {
				t.Fatalf("%s, attempt %d: %d %q, want the server's 200", proto, i, resp.StatusCode, body)
			}
		}
	}
}

// TestProxyRejudgesOpenConnections: a reload judges the next request of a
// connection opened before it. When the port is no longer an L7 port and
// L3/L4 no longer allows the connection (here: the configuration says
// nothing of it), the proxy closes the connection without forwarding.
func TestProxyRejudgesOpenConnections(t *testing.T) {
	up, received := upstream(t)
	cfg := Config{Set: "s1", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{{Identity: 300, Rules: []l7.Rule{{Path: "/public"}}}}}}}
	dir, addr := startProxy(t, up, cfg)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	get := func(path string) (int, error) {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: web.example\r\n\r\n", path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if st, err := get("/public"); st != 200 {
		t.Fatalf("GET /public: %d %v", st, err)
	}
	writeConfig(t, dir, Config{Set: "s2", Identities: cfg.Identities})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Command(ctx, dir, "reload"); err != nil {
		t.Fatal(err)
	}
	before := received.Load()
	if st, err := get("/private"); st != 0 || received.Load() != before {
		t.Errorf("GET /private after the port stopped being an L7 port, L3/L4 allowing nothing: %d %v (server reached %v), want the connection closed", st, err, received.Load() != before)
	}
}
