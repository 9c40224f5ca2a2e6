package traffic

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeUDPServer answers udp-rr requests as RRServe does (the request's
// first 4 bytes copied into the response), each after delay(k) for the
// k-th request (from 1); a negative delay drops the request.
func fakeUDPServer(t *testing.T, respSize int, delay func(k int) time.Duration) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for k := 1; ; k++ {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			d := delay(k)
			if d < 0 {
				continue
			}
			resp := make([]byte, respSize)
			if n >= 4 {
				copy(resp, buf[:4])
			}
			time.AfterFunc(d, func() { _, _ = pc.WriteTo(resp, from) })
		}
	}()
	return pc.LocalAddr().String()
}

// fakeTCPServer accepts one connection at a time and calls handle with it.
func fakeTCPServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			handle(c)
			c.Close()
		}
	}()
	return l.Addr().String()
}

// TestRRUDPLateResponse: a response that comes after its request timed
// out is not taken for the next request's. Every response takes 40 ms;
// the third 120 ms, so it arrives between the fourth request (sent at the
// 100 ms timeout) and the fourth response: taken for it, every later
// transaction would be shifted by one and look 20 ms long.
func TestRRUDPLateResponse(t *testing.T) {
	addr := fakeUDPServer(t, 200, func(k int) time.Duration {
		if k == 3 {
			return 120 * time.Millisecond
		}
		return 40 * time.Millisecond
	})
	c := RRConfig{Mode: UDPRR, Addr: addr, RequestSize: 100, ResponseSize: 200, Duration: 600 * time.Millisecond, Timeout: 100 * time.Millisecond}
	r, err := RRRun(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeouts != 1 || r.LatencyUs.Min < 0.99*40e3 || r.Transactions < 5 {
		t.Errorf("%d transactions, %d timeouts, min latency %.0f us (want 1 timeout, none under 40 ms)", r.Transactions, r.Timeouts, r.LatencyUs.Min)
	}
}

// TestRRUDPWarmupAndElapsed: timeouts in the warm-up are not counted, and
// the measured time stops at the last completed transaction, not after
// the wait for a lost one.
func TestRRUDPWarmupAndElapsed(t *testing.T) {
	addr := fakeUDPServer(t, 1, func(k int) time.Duration {
		if k == 2 {
			return -1 // in the warm-up
		}
		return 0
	})
	c := RRConfig{Mode: UDPRR, Addr: addr, RequestSize: 1, ResponseSize: 1, Warmup: 200 * time.Millisecond, Duration: 200 * time.Millisecond, Timeout: 50 * time.Millisecond}
	r, err := RRRun(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeouts != 0 || r.Transactions == 0 {
		t.Errorf("warm-up: %d timeouts, %d transactions", r.Timeouts, r.Transactions)
	}

	// Every request after the 20th is lost: the run ends with timeouts.
	addr = fakeUDPServer(t, 1, func(k int) time.Duration {
		if k > 20 {
			return -1
		}
		return 0
	})
	c = RRConfig{Mode: UDPRR, Addr: addr, RequestSize: 1, ResponseSize: 1, Duration: 300 * time.Millisecond, Timeout: 100 * time.Millisecond}
	r, err = RRRun(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if r.Transactions != 20 || r.Timeouts < 2 || r.Seconds > 0.1 {
		t.Errorf("%d transactions, %d timeouts in %.3f s (want 20, some, the time of the 20)", r.Transactions, r.Timeouts, r.Seconds)
	}
	if got := float64(r.Transactions) / r.Seconds; got/r.PerSecond < 0.99 || got/r.PerSecond > 1.01 {
		t.Errorf("rate %.0f/s, transactions/seconds %.0f", r.PerSecond, got)
	}
}

// TestRRDrain: without sequence numbers (sizes under 4 bytes), datagrams
// left after a timeout are discarded.
func TestRRDrain(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	for range 3 {
		if _, err := unix.Write(fds[1], []byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	drain(fds[0], make([]byte, 16))
	if n, _, err := unix.Recvfrom(fds[0], make([]byte, 16), unix.MSG_DONTWAIT); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("after drain: read %d, %v", n, err)
	}
}

// TestRRTCPSlow: a TCP transaction slower than Timeout is waited for; one
// that makes no progress for 10 Timeouts ends the run with an error; the
// run's end while waiting is not an error; ctx ends the run at once.
func TestRRTCPSlow(t *testing.T) {
	slowSecond := func(conn net.Conn) {
		buf := make([]byte, 1)
		for k := 1; ; k++ {
			if _, err := io.ReadFull(conn, buf); err != nil {
				return
			}
			if k == 2 {
				time.Sleep(250 * time.Millisecond)
			}
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
	}
	c := RRConfig{Mode: TCPRR, Addr: fakeTCPServer(t, slowSecond), RequestSize: 1, ResponseSize: 1, Duration: 500 * time.Millisecond, Timeout: 50 * time.Millisecond}
	r, err := RRRun(context.Background(), c)
	if err != nil {
		t.Fatalf("a slow transaction: %v", err)
	}
	if r.Transactions < 3 || r.LatencyUs.Max < 250e3 {
		t.Errorf("%d transactions, max %.0f us", r.Transactions, r.LatencyUs.Max)
	}

	// A server that answers once, then never again.
	answered := make(chan struct{})
	silent := func(conn net.Conn) {
		buf := make([]byte, 1)
		if _, err := io.ReadFull(conn, buf); err == nil {
			_, _ = conn.Write(buf)
		}
		<-answered
	}
	c.Addr = fakeTCPServer(t, silent)
	defer close(answered)
	c.Duration, c.Timeout = 10*time.Second, 30*time.Millisecond
	start := time.Now()
	_, err = RRRun(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "stalled: nothing moved for 300ms (10 timeouts of 30ms)") || time.Since(start) > 3*time.Second {
		t.Errorf("a stalled server: %v after %v", err, time.Since(start))
	}

	c.Addr = fakeTCPServer(t, silent)
	c.Duration, c.Timeout = 200*time.Millisecond, 100*time.Millisecond
	r, err = RRRun(context.Background(), c)
	if err != nil || r.Transactions != 1 || r.Seconds > 0.2 {
		t.Errorf("the run ends while waiting: %v %+v", err, r)
	}

	c.Addr = fakeTCPServer(t, silent)
	c.Duration, c.Timeout = 10*time.Second, 50*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := RRRun(ctx, c); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("ctx ends: %v after %v", err, time.Since(start))
	}
}

// TestRRConnectTimeout: a connect whose SYN is dropped (here by a full
// accept queue) fails after ConnectTimeout with an error saying so.
func TestRRConnectTimeout(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	full, err := net.Dial("tcp", addr) // fills the queue of one, never accepted
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	for _, mode := range []string{TCPRR, TCPCRR} {
		c := RRConfig{Mode: mode, Addr: addr, RequestSize: 1, ResponseSize: 1, Duration: 10 * time.Second,
			Timeout: 50 * time.Millisecond, ConnectTimeout: 300 * time.Millisecond}
		start := time.Now()
		_, err := RRRun(context.Background(), c)
		want := "connect " + addr + ": timed out after 300ms; is a policy dropping it?"
		if err == nil || err.Error() != want || time.Since(start) > 2*time.Second {
			t.Errorf("%s: %v after %v, want %q", mode, err, time.Since(start), want)
		}
	}
}

// TestRRCRRLeavesNoTimeWait: after a tcp-crr run no TIME_WAIT socket is
// left on either side (the server closes first, the client resets).
func TestRRCRRLeavesNoTimeWait(t *testing.T) {
	port := freePort(t, "tcp")
	c := RRConfig{Mode: TCPCRR, Addr: fmt.Sprintf("127.0.0.1:%d", port), RequestSize: 1, ResponseSize: 1, Duration: 200 * time.Millisecond}
	serve(t, c)
	r, err := RRRun(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	// The client resets each connection once the server closed it:
	// neither side keeps a TIME_WAIT socket, which thousands a second
	// would soon hold the 4-tuples the client's ports come back to.
	client, server := timeWaits(t, port)
	if client != 0 || server != 0 || r.Transactions < 100 {
		t.Errorf("after %d transactions: %d TIME_WAIT sockets on the client's side, %d on the server's", r.Transactions, client, server)
	}
}

// timeWaits counts the IPv4 TCP sockets in TIME_WAIT to and from port.
func timeWaits(t *testing.T, port int) (to, from int) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	portOf := func(addr string) int {
		_, hex, _ := strings.Cut(addr, ":")
		p, _ := strconv.ParseInt(hex, 16, 32)
		return int(p)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text()) // sl local rem st ...
		if len(fields) < 4 || fields[3] != "06" {
			continue
		}
		if portOf(fields[2]) == port {
			to++
		}
		if portOf(fields[1]) == port {
			from++
		}
	}
	return to, from
}

// TestRRServeAcceptError: an accept error other than EINTR or
// ECONNABORTED ends the server at once, though a connection is open and
// waiting, and its descriptors are not touched once closed (they may
// belong to another socket by then).
func TestRRServeAcceptError(t *testing.T) {
	c := RRConfig{Mode: TCPRR, Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t, "tcp")), RequestSize: 1, ResponseSize: 1, Duration: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- RRServe(ctx, c, ready) }()
	<-ready
	idle, err := net.Dial("tcp", c.Addr) // a connection the server waits on
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(50 * time.Millisecond)
	next, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(next)
	sa, _ := sockaddr(c.Addr)
	// No descriptor left: the server's accept fails with EMFILE.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	probe, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(probe) // the lowest free descriptor
	low := lim
	low.Cur = uint64(probe)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	err = unix.Connect(next, sa)
	select {
	case err = <-done:
	case <-time.After(3 * time.Second):
		err = errors.New("server still running")
	}
	if e := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); e != nil {
		t.Fatal(e)
	}
	if !errors.Is(err, unix.EMFILE) {
		t.Fatalf("server: %v, want accept: too many open files", err)
	}
	// New sockets take the server's closed descriptors; ctx's end must
	// not shut them down.
	var pairs [][2]int
	for range 4 {
		p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		pairs = append(pairs, p)
	}
	cancel()
	time.Sleep(50 * time.Millisecond)
	for _, p := range pairs {
		for _, fd := range p {
			if _, err := unix.Write(fd, []byte{1}); err != nil {
				t.Errorf("fd %d after the server's ctx ended: %v", fd, err)
			}
		}
	}
}

// TestSelfConnect: a socket bound to the port it connects to on loopback
// connects to itself (TCP's simultaneous open), which is how a client
// whose server is missing could "answer" its own requests; selfConnected
// tells it apart from a real connection.
func TestSelfConnect(t *testing.T) {
	port := freePort(t, "tcp")
	sa := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(fd, sa); err != nil {
		t.Skipf("no simultaneous open on this kernel: %v", err)
	}
	if !selfConnected(fd, sa) {
		t.Error("a socket connected to itself is not seen as such")
	}
	// A real connection.
	c := RRConfig{Mode: TCPRR, Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t, "tcp")), RequestSize: 1, ResponseSize: 1, Duration: time.Second}
	serve(t, c)
	peer, _ := sockaddr(c.Addr)
	fd2, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd2)
	if err := unix.Connect(fd2, peer); err != nil {
		t.Fatal(err)
	}
	if selfConnected(fd2, peer) {
		t.Error("a connection to a server is seen as a self-connection")
	}
}

// TestRRIPv6 runs every mode over IPv6 (loopback ::1).
func TestRRIPv6(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	l.Close()
	for _, mode := range []string{TCPRR, TCPCRR, UDPRR} {
		t.Run(mode, func(t *testing.T) {
			proto := "tcp"
			if mode == UDPRR {
				proto = "udp"
			}
			port := freePort(t, proto)
			c := RRConfig{Mode: mode, Addr: fmt.Sprintf("[::1]:%d", port), RequestSize: 100, ResponseSize: 200, Duration: 200 * time.Millisecond}
			serve(t, c)
			r, err := RRRun(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if r.Transactions < 10 {
				t.Errorf("%d transactions over IPv6", r.Transactions)
			}
		})
	}
}
