package l7proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnlab/cnlab/l7"
)

// The differential test of the proxy: what the server receives must be
// exactly what the rules judged. A raw server records each request's
// line and header lines as they arrive; the proxy's hook records each
// forwarded request as it was judged (l7.Request: method, path, host,
// header); the two must agree byte for byte, but for the body's framing
// (Content-Length, Transfer-Encoding), which each side of the proxy has
// its own of, and header names, which HTTP compares without case.

// rawServer is an HTTP/1.1 server that records the head of every request
// as it arrives and answers 200 "ok".
type rawServer struct {
	ln   net.Listener
	mu   sync.Mutex
	seen []string // request line and header lines, "\r\n"-joined
}

func newRawServer(t testing.TB) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *rawServer) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		var lines []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
			if line == "" {
				break
			}
			lines = append(lines, line)
		}
		s.mu.Lock()
		s.seen = append(s.seen, strings.Join(lines, "\r\n"))
		s.mu.Unlock()
		// The body, by the framing the proxy chose.
		for _, l := range lines[1:] {
			name, value, _ := strings.Cut(l, ":")
			value = strings.TrimSpace(value)
			switch http.CanonicalHeaderKey(name) {
			case "Content-Length":
				n, _ := strconv.ParseInt(value, 10, 64)
				if _, err := io.CopyN(io.Discard, br, n); err != nil {
					return
				}
			case "Transfer-Encoding":
				if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
					return
				}
				for { // trailers, to the empty line
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if strings.TrimSpace(line) == "" {
						break
					}
				}
			}
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

func (s *rawServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *rawServer) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

// diffProxy is a proxy allowing every request to a raw server, recording
// what it forwards.
type diffProxy struct {
	addr   string
	server *rawServer
	mu     sync.Mutex
	judged []l7.Request
}

func newDiffProxy(t testing.TB, rules []l7.Rule) *diffProxy {
	t.Helper()
	d := &diffProxy{server: newRawServer(t)}
	up := d.server.ln.Addr().(*net.TCPAddr).AddrPort()
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: up.Addr(), Port: up.Port(), Peers: []PeerConfig{{Identity: 300, Rules: rules}}}}}
	_, d.addr = startProxyWith(t, up, cfg, func(r l7.Request) {
		r.Header = r.Header.Clone() // the proxy goes on using its own
		d.mu.Lock()
		d.judged = append(d.judged, r)
		d.mu.Unlock()
	})
	return d
}

// exchange sends raw bytes on a new connection, shuts its sending side
// down, and returns the statuses of the answers, what the proxy judged
// and forwarded, and what the server received.
func (d *diffProxy) exchange(raw string) (statuses []int, judged []l7.Request, received []string, err error) {
	c, err := net.Dial("tcp4", d.addr)
	if err != nil {
		return nil, nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.WriteString(c, raw)
	_ = c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	for err == nil {
		var resp *http.Response
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 1 { // 100 Continue comes before the answer
			statuses = append(statuses, resp.StatusCode)
		}
	}
	c.Close()
	if err == io.EOF || err == io.ErrUnexpectedEOF || isReset(err) {
		err = nil
	}
	d.mu.Lock()
	judged, d.judged = d.judged, nil
	d.mu.Unlock()
	// A request forwarded with an incomplete body may be answered (502)
	// before the server has read its head: wait for it a little.
	for i := 0; i < 200 && d.server.count() < len(judged); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	return statuses, judged, d.server.take(), err
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// framing are the headers of the body's framing, each side's own.
var framing = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}

// received renders what the proxy judged as the server must receive it:
// the request line, then Host, then the header lines sorted.
func judgedHead(r l7.Request) string {
	var lines []string
	for name, values := range r.Header {
		if framing[name] {
			continue
		}
		for _, v := range values {
			lines = append(lines, name+": "+v)
		}
	}
	slices.Sort(lines)
	return strings.Join(append([]string{r.Method + " " + r.Path + " HTTP/1.1", "Host: " + r.Host}, lines...), "\r\n")
}

// receivedHead puts what the server received in the same form: header
// names canonical, the values of one name in the order received.
func receivedHead(raw string) string {
	lines := strings.Split(raw, "\r\n")
	var host string
	var rest []string
	for _, l := range lines[1:] {
		name, value, _ := strings.Cut(l, ":")
		name = http.CanonicalHeaderKey(name)
		value = strings.TrimLeft(value, " ")
		switch {
		case name == "Host":
			host = value
		case framing[name]:
		default:
			rest = append(rest, name+": "+value)
		}
	}
	slices.Sort(rest)
	return strings.Join(append([]string{lines[0], "Host: " + host}, rest...), "\r\n")
}

// compare checks one exchange: every request forwarded reached the server
// as judged, and nothing else did.
func compare(judged []l7.Request, received []string) error {
	if len(judged) != len(received) {
		return fmt.Errorf("the proxy forwarded %d requests, the server received %d: %q", len(judged), len(received), received)
	}
	for i := range judged {
		if want, got := judgedHead(judged[i]), receivedHead(received[i]); want != got {
			return fmt.Errorf("request %d:\njudged:\n%s\nreceived:\n%s", i+1, want, got)
		}
	}
	return nil
}

// Corpus of the differential test (and seeds of the fuzz target).
var (
	diffMethods = []string{"GET", "get", "POST", "OPTIONS", "DELETE"}
	diffTargets = []string{
		"/", "/public", "/public?q=1", "/a%2fb", "/a%2Fb", "/a/%2e%2e/b", "/a/../b", "/./a", "/a/./b/",
		"//double", "//double/x%2f", "//double{x", "/%7Bx%7d", "/{x}", "/a|b", "/a\"b", "/a\\b", "/a^b", "/a`b",
		"/\xc3\xa9", "/%c3%a9", "/%", "/%zz", "/a?b=%zz;c", "/a?", "/a?&&", "/a#frag", "/a?b#c", "/a;p=1",
		"/public/%2e%2e%2fprivate%2fx{%2f%2e%2e", "*",
		"http://web.example/abs{x}", "HTTP://Web.Example:80/p?q", "http://h", "http://h?x=1", "http://u@h/p",
	}
	diffHeaders = []string{
		"",
		"X-Token: a\r\nX-Token: b\r\n",
		"x-token: A\r\nX-TOKEN: a\r\n",
		"Connection: X-Token, keep-alive\r\nX-Token: a\r\n",
		"Connection: close\r\n",
		"Connection: x-token\r\nConnection: X-Other\r\nX-Token: a\r\nX-Other: b\r\nX-Kept: c\r\n",
		"Keep-Alive: 300\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n",
		"Te: trailers\r\n",
		"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAAA\r\n",
		"Upgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: x\r\n",
		"X-Forwarded-For: 1.2.3.4\r\nForwarded: for=1.2.3.4\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\n",
		"X-Empty:\r\nX-Spaces:   a  b  \r\nX-Tab:\ta\t\r\n",
		"User-Agent: probe/1\r\nAccept: */*\r\n",
		"User-Agent: one\r\nUser-Agent: two\r\n",
		"X-Fold: a\r\n b\r\n \r\nX-Next: c\r\n",
		"User-Agent:\r\nX-A: 1\r\n",
		"Content-Length: 3\r\n\r\nabc",
		"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"Expect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
		"Trailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n\r\n",
		"X-\xc3\xa9: v\r\n",
		"X-Val: \xc3\xa9\r\n",
	}
)

// rawRequest builds one request; a header block holding a blank line
// carries the request's body after it.
func rawRequest(method, target, header string) string {
	head, body, hasBody := strings.Cut(header, "\r\n\r\n")
	if hasBody {
		head += "\r\n"
	}
	return method + " " + target + " HTTP/1.1\r\nHost: web.example\r\n" + head + "\r\n" + body
}

// TestProxyDifferential sends every method, target and header set of the
// corpus through a proxy whose rules allow everything: each request is
// forwarded exactly as judged, or refused (400) and not forwarded.
func TestProxyDifferential(t *testing.T) {
	d := newDiffProxy(t, []l7.Rule{{}})
	counts := map[int]int{}
	for _, method := range diffMethods {
		for _, target := range diffTargets {
			for _, header := range diffHeaders {
				raw := rawRequest(method, target, header)
				statuses, judged, received, err := d.exchange(raw)
				if err != nil {
					t.Fatalf("%q: %v", raw, err)
				}
				if err := compare(judged, received); err != nil {
					t.Errorf("%q: %v", raw, err)
				}
				if len(statuses) != 1 || (statuses[0] != 200 && statuses[0] != 400) {
					t.Errorf("%q: statuses %v, want one 200 (forwarded) or 400", raw, statuses)
				}
				for _, s := range statuses {
					counts[s]++
				}
			}
		}
	}
	t.Logf("answers by status: %v", counts)
	if counts[200] == 0 {
		t.Error("nothing was forwarded")
	}
}

// TestProxyJudgesTheForwardedHeader: a header the proxy does not forward
// (named by Connection, hop-by-hop, or a forwarding header it replaces)
// does not satisfy a rule, since the server never sees it.
func TestProxyJudgesTheForwardedHeader(t *testing.T) {
	d := newDiffProxy(t, []l7.Rule{{Path: "/token", Headers: []l7.HeaderMatch{{Name: "X-Token"}}},
		{Path: "/xff", Headers: []l7.HeaderMatch{{Name: "X-Forwarded-For", Value: "10.9.9.9"}}}})
	for _, c := range []struct {
		path, header string
		status       int
	}{
		{"/token", "X-Token: 1\r\n", 200},
		{"/token", "Connection: X-Token\r\nX-Token: 1\r\n", 403},
		{"/token", "Connection: keep-alive, x-token\r\nX-Token: 1\r\n", 403},
		{"/xff", "X-Forwarded-For: 10.9.9.9\r\n", 403}, // the proxy's own X-Forwarded-For is 127.0.0.1
	} {
		raw := rawRequest("GET", c.path, c.header)
		statuses, judged, received, err := d.exchange(raw)
		if err != nil {
			t.Fatal(err)
		}
		if len(statuses) != 1 || statuses[0] != c.status {
			t.Errorf("%q: %v, want %d", raw, statuses, c.status)
		}
		if err := compare(judged, received); err != nil {
			t.Errorf("%q: %v", raw, err)
		}
	}
}

// FuzzProxyDifferential: whatever the bytes of the method, the
// request-target and the header block (a body, or a second request,
// after a blank line in it), every request the proxy forwards reaches the
// server exactly as judged, and nothing else reaches it.
//
//	go test -run '^$' -fuzz FuzzProxyDifferential -fuzztime 10m ./l7proxy
func FuzzProxyDifferential(f *testing.F) {
	for i, target := range diffTargets {
		f.Add(diffMethods[i%len(diffMethods)], target, diffHeaders[i%len(diffHeaders)])
	}
	for i, header := range diffHeaders {
		f.Add("GET", diffTargets[i%len(diffTargets)], header)
	}
	f.Add("GET", "/a", "X: 1\r\n\r\nGET /b{%2e} HTTP/1.1\r\nHost: h\r\nConnection: X-Y\r\nX-Y: 2\r\n")
	d := newDiffProxy(f, []l7.Rule{{}})
	f.Fuzz(func(t *testing.T, method, target, header string) {
		raw := rawRequest(method, target, header)
		_, judged, received, err := d.exchange(raw)
		if err != nil && !bytes.Contains([]byte(err.Error()), []byte("timeout")) {
			t.Fatalf("%q: %v", raw, err)
		}
		if err := compare(judged, received); err != nil {
			t.Errorf("%q: %v", raw, err)
		}
	})
}
