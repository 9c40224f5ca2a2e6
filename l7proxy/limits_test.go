package l7proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnlab/cnlab/l7"
)

// Tests of the proxy's limits with real sockets (issue 36): a slow, a
// non-reading, an idle or a pipelining client costs bounded memory and
// does not hold up another client's requests. The delay they add to
// another client is measured, not asserted: BenchmarkProxyUnderAbuse.

// limitedProxy runs a proxy with the given limits, GET /public and GET
// /big allowed from loopback, in front of a server answering /big with
// bigBody bytes.
func limitedProxy(t *testing.T, lim Limits) (dir, addr string, served *countingServer) {
	t.Helper()
	served = newCountingServer(t)
	cfg := Config{Set: "s", Identities: map[netip.Addr]uint32{netip.MustParseAddr("127.0.0.1"): 300},
		Ports: []PortConfig{{Addr: served.addr.Addr(), Port: served.addr.Port(), Peers: []PeerConfig{{Identity: 300,
			Rules: []l7.Rule{{Method: "GET", Path: "/public"}, {Method: "GET", Path: "/big"}, {Method: "POST", Path: "/post"}}}}}},
		Limits: lim}
	dir, addr = startProxy(t, served.addr, cfg)
	return dir, addr, served
}

const bigBody = 4 << 20

type countingServer struct {
	addr netip.AddrPort
	mu   sync.Mutex
	n    int
}

func newCountingServer(t testing.TB) *countingServer {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &countingServer{addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	big := strings.Repeat("x", bigBody)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.n++
		s.mu.Unlock()
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *countingServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// stats reads a proxy's counters.
func stats(t *testing.T, dir string) Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := Command(ctx, dir, "stats")
	if err != nil {
		t.Fatal(err)
	}
	var s Stats
	if err := json.Unmarshal([]byte(reply), &s); err != nil {
		t.Fatalf("stats %q: %v", reply, err)
	}
	return s
}

// closedWithin reports whether the proxy closes c within d (what was
// sent to c before is read away).
func closedWithin(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("still open after %s", d)
	}
	return nil
}

// keepAliveClient sends n GET /public on one connection and fails the
// test on any answer other than 200, or one slower than a second (a
// request held up behind another client's).
func keepAliveClient(t *testing.T, addr string, n int) {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range n {
		start := time.Now()
		_ = c.SetDeadline(start.Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /public HTTP/1.1\r\nHost: web.example\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("request %d took %s", i, d)
		}
	}
}

func TestProxyHeaderLimits(t *testing.T) {
	_, addr, _ := limitedProxy(t, Limits{MaxHeaderBytes: 4096, MaxHeaders: 10})
	for _, c := range []struct {
		name, header string
		want         int
	}{
		{"header within both limits", strings.Repeat("X-A: 1\r\n", 10), 200},
		{"one line too many", strings.Repeat("X-A: 1\r\n", 11), 431},
		{"a header beyond the bytes", "X-Big: " + strings.Repeat("a", 5000) + "\r\n", 431},
		{"lines beyond the bytes", strings.Repeat("X-Abcdefghijklmnopqrstuvwxyz: 1\r\n", 200), 431},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			// Host is the request's authority, not one of its header
			// lines: 10 lines besides it are within maxHeaders 10.
			if _, err := io.WriteString(conn, "GET /public HTTP/1.1\r\nHost: web.example\r\n"+c.header+"\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
			if c.want == 431 {
				if err := closedWithin(conn, 2*time.Second); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestProxySlowClients: clients sending their heads a line at a time
// (slowloris) are closed after HeaderTimeout, and meanwhile another
// client's requests go through.
func TestProxySlowClients(t *testing.T) {
	const slow = 50
	_, addr, _ := limitedProxy(t, Limits{HeaderTimeout: 700 * time.Millisecond})
	conns := make([]net.Conn, slow)
	for i := range conns {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := io.WriteString(c, "GET /public HTTP/1.1\r\n"); err != nil {
				return
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := fmt.Fprintf(c, "X-Slow-%d: 1\r\n", i); err != nil {
					return
				}
			}
		}()
	}
	start := time.Now()
	keepAliveClient(t, addr, 200)
	for i, c := range conns {
		if err := closedWithin(c, 3*time.Second-time.Since(start)); err != nil {
			t.Errorf("slow client %d: %v (headerTimeout 700ms)", i, err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestProxyClientThatDoesNotRead: a client pipelining requests for a large
// answer and reading none is closed after WriteTimeout; the proxy holds
// no more of the answers than its copy buffer meanwhile, and another
// client's requests go through.
func TestProxyClientThatDoesNotRead(t *testing.T) {
	_, addr, served := limitedProxy(t, Limits{WriteTimeout: time.Second})
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	before := heapInUse()
	if _, err := io.WriteString(c, strings.Repeat("GET /big HTTP/1.1\r\nHost: web.example\r\n\r\n", 20)); err != nil {
		t.Fatal(err)
	}
	keepAliveClient(t, addr, 100)
	// The proxy is stuck writing the first answer: the server answered
	// it (and may have answered nothing else).
	if n := served.count(); n < 101 || n > 102 {
		t.Errorf("the server answered %d requests, want the other client's 100 and the first /big", n)
	}
	if grown := heapInUse() - before; grown > bigBody/2 {
		t.Errorf("the heap grew by %d bytes while a %d-byte answer waited for its client", grown, bigBody)
	}
	time.Sleep(1200 * time.Millisecond)
	if err := closedWithin(c, 3*time.Second); err != nil {
		t.Fatalf("the client that does not read: %v (writeTimeout 1s)", err)
	}
}

// TestProxyIdleKeepAlives: idle keep-alive connections hold no buffers
// (their goroutine and sockets only), and IdleTimeout closes them.
func TestProxyIdleKeepAlives(t *testing.T) {
	const n = 400
	dir, addr, served := limitedProxy(t, Limits{IdleTimeout: 2 * time.Second})
	// What n idle connections cost this process straight to the server
	// (the test's side and the server's), then through the proxy: the
	// difference is the proxy's.
	before := heapInUse()
	direct := idleConns(t, served.addr.String(), n)
	straight := heapInUse() - before
	for _, c := range direct {
		c.Close()
	}
	before = heapInUse()
	conns := idleConns(t, addr, n)
	proxied := heapInUse() - before
	perConn := (proxied - straight) / n
	t.Logf("%d idle keep-alive connections: %d bytes each straight to the server, %d through the proxy: the proxy's %d",
		n, straight/n, proxied/n, perConn)
	// A connection's goroutine stack (8 KiB) and its and its upstream
	// connection's structures: with their four 4 KiB buffers it would be
	// more than 24 KiB.
	if perConn > 16<<10 {
		t.Errorf("an idle keep-alive connection costs the proxy %d bytes, want at most 16 KiB (buffers released)", perConn)
	}
	if s := stats(t, dir); s.Open != n {
		t.Errorf("stats: %d connections open, want %d", s.Open, n)
	}
	for i, c := range conns {
		if err := closedWithin(c, 4*time.Second); err != nil {
			t.Fatalf("connection %d: %v (idleTimeout 2s)", i, err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for stats(t, dir).Open != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s := stats(t, dir); s.Open != 0 {
		t.Errorf("stats: %d connections open after the idle timeout", s.Open)
	}
}

// idleConns opens n connections to addr, each after one GET /public
// answered 200.
func idleConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	buf := make([]byte, 512)
	for i := range conns {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /public HTTP/1.1\r\nHost: web.example\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if k, err := c.Read(buf); err != nil || !strings.HasPrefix(string(buf[:k]), "HTTP/1.1 200") {
			t.Fatalf("connection %d: %q %v", i, buf[:k], err)
		}
		_ = c.SetDeadline(time.Time{})
	}
	return conns
}

// heapInUse is the process's heap and goroutine stacks in use, after a
// collection.
func heapInUse() int64 {
	for range 4 { // stacks shrink by half per collection
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// TestProxyPipelining: requests sent at once on one connection are each
// judged and answered in order.
func TestProxyPipelining(t *testing.T) {
	_, addr, served := limitedProxy(t, Limits{})
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	for i := range 100 {
		path := "/public"
		if i%2 == 1 {
			path = "/private"
		}
		fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: web.example\r\n\r\n", path)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 100 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if want := []int{200, 403}[i%2]; resp.StatusCode != want {
			t.Fatalf("answer %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
	if n := served.count(); n != 50 {
		t.Errorf("the server received %d requests, want the 50 allowed", n)
	}
}

// TestProxyMaxConnections: a connection beyond MaxConnections is closed
// at once, and counted.
func TestProxyMaxConnections(t *testing.T) {
	dir, addr, _ := limitedProxy(t, Limits{MaxConnections: 3})
	var open []net.Conn
	for range 3 {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		open = append(open, c)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /public HTTP/1.1\r\nHost: web.example\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	extra, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := closedWithin(extra, 2*time.Second); err != nil {
		t.Fatalf("a fourth connection with maxConnections 3: %v", err)
	}
	if s := stats(t, dir); s.Refused != 1 || s.Open != 3 {
		t.Errorf("stats: refused %d, open %d; want 1 and 3", s.Refused, s.Open)
	}
	open[0].Close()
	deadline := time.Now().Add(2 * time.Second)
	for stats(t, dir).Open != 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	keepAliveClient(t, addr, 1)
}

// TestProxyStalledBody: a client that stops sending its request's body
// is closed after IdleTimeout, whether the proxy forwards the request or
// reads its body away after answering 403.
func TestProxyStalledBody(t *testing.T) {
	_, addr, _ := limitedProxy(t, Limits{IdleTimeout: 500 * time.Millisecond})
	for _, path := range []string{"/post", "/denied"} {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: web.example\r\nContent-Length: 100\r\n\r\n0123456789"); err != nil {
			t.Fatal(err)
		}
		if err := closedWithin(c, 3*time.Second); err != nil {
			t.Fatalf("POST %s, its body stalled at 10 of 100 bytes: %v (idleTimeout 500ms)", path, err)
		}
	}
}
