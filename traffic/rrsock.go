package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The request/response tool uses blocking sockets, one OS thread each, as
// netperf does: a transaction's latency then includes the wake-up of a
// process sleeping in recv(), which is what netperf's TCP_RR figures of the
// seed studies contain. (Go's own network poller spins before sleeping,
// which measured about 5x lower round trips on loopback here than any
// blocking tool: a different quantity.)
//
// udp-rr requests of 4 bytes or more carry a sequence number in their
// first 4 bytes (big-endian), which the server copies into the response:
// the client tells a late response to an earlier request from the one it
// waits for.

func sockaddr(addr string) (unix.Sockaddr, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: want IPv4:port or [IPv6]:port", addr)
	}
	if a := ap.Addr().Unmap(); a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}, nil
	}
	if ap.Addr().Zone() != "" {
		return nil, fmt.Errorf("address %q: an IPv6 address with a zone is not supported", addr)
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}, nil
}

// domain is the socket domain of a socket address: AF_INET or AF_INET6.
func domain(sa unix.Sockaddr) int {
	if _, ok := sa.(*unix.SockaddrInet6); ok {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// socket opens a socket of domain with the rr options: TCP_NODELAY for
// TCP, and the timeout (if not 0) on blocking reads and writes. flags are
// added to the type (SOCK_NONBLOCK for a connect with a timeout).
func socket(domain, typ, flags int, timeout time.Duration) (int, error) {
	fd, err := unix.Socket(domain, typ|flags|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if typ == unix.SOCK_STREAM {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if timeout > 0 {
		setTimeout(fd, unix.SO_RCVTIMEO, timeout)
		setTimeout(fd, unix.SO_SNDTIMEO, timeout)
	}
	return fd, nil
}

// setTimeout sets SO_RCVTIMEO or SO_SNDTIMEO to d, at least 1 us (0 would
// mean no timeout).
func setTimeout(fd, opt int, d time.Duration) {
	tv := unix.NsecToTimeval(max(d, time.Microsecond).Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv)
}

// A waitFunc is called when a blocking read or write timed out (EAGAIN
// after the socket's SO_RCVTIMEO or SO_SNDTIMEO) with the number of
// timeouts in a row without progress; it returns nil to keep waiting. A
// nil waitFunc makes a timeout an error.
type waitFunc func(stalls int) error

// ioRetry decides what to do after a read or write error: retry (nil) or
// give up (an error).
func ioRetry(err error, stalls *int, wait waitFunc) error {
	switch {
	case err == unix.EINTR:
		return nil
	case isTimeout(err) && wait != nil:
		*stalls++
		return wait(*stalls)
	}
	return err
}

func writeAll(fd int, b []byte, wait waitFunc) error {
	stalls := 0
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			if err := ioRetry(err, &stalls, wait); err != nil {
				return err
			}
			continue
		}
		b, stalls = b[n:], 0
	}
	return nil
}

// readFull reads len(b) bytes; io.EOF if the peer closed first. It
// returns how many bytes it read.
func readFull(fd int, b []byte, wait waitFunc) (int, error) {
	stalls, got := 0, 0
	for got < len(b) {
		n, err := unix.Read(fd, b[got:])
		if err != nil {
			if err := ioRetry(err, &stalls, wait); err != nil {
				return got, err
			}
			continue
		}
		if n == 0 {
			return got, io.EOF
		}
		got, stalls = got+n, 0
	}
	return got, nil
}

// errMoreData: bytes came where only the peer's close was expected.
var errMoreData = errors.New("more bytes came than the response size")

// readEOF waits until the peer closes; errMoreData if bytes come instead.
func readEOF(fd int, buf []byte, wait waitFunc) error {
	stalls := 0
	for {
		n, err := unix.Read(fd, buf)
		switch {
		case err != nil:
			if err := ioRetry(err, &stalls, wait); err != nil {
				return err
			}
		case n == 0:
			return nil
		default:
			return errMoreData
		}
	}
}

func isTimeout(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK)
}

// fdSet is a server's open sockets, for ctx's end to shut them down
// (which wakes a blocked accept or recv). A socket is shut down only while
// it is registered and deregistered before it is closed, both under mu: a
// closed descriptor, perhaps already reused by another socket, is never
// touched.
type fdSet struct {
	mu      sync.Mutex
	fds     map[int]bool
	stopped bool
}

// add registers fd; false (fd not registered) once the set is shut down.
func (s *fdSet) add(fd int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.fds[fd] = true
	return true
}

// close deregisters and closes fd.
func (s *fdSet) close(fd int) {
	s.mu.Lock()
	delete(s.fds, fd)
	s.mu.Unlock()
	unix.Close(fd)
}

// shutdown shuts down every registered socket, and those added later.
func (s *fdSet) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for fd := range s.fds {
		_ = unix.Shutdown(fd, unix.SHUT_RDWR)
	}
}

// RRServe answers requests on c.Addr until ctx ends: TCP connections get
// a response of ResponseSize bytes for every RequestSize bytes read (with
// tcp-crr the server then closes first, as netperf's does, and the client
// answers with a reset, so that neither side keeps a TIME_WAIT socket);
// UDP datagrams get one response datagram each, carrying the
// request's first 4 bytes. ready, if not nil, is closed once the socket
// listens.
func RRServe(ctx context.Context, c RRConfig, ready chan<- struct{}) error {
	sa, err := sockaddr(c.Addr)
	if err != nil {
		return err
	}
	typ := unix.SOCK_STREAM
	if c.Mode == UDPRR {
		typ = unix.SOCK_DGRAM
	}
	fd, err := socket(domain(sa), typ, 0, 0)
	if err != nil {
		return err
	}
	fds := &fdSet{fds: map[int]bool{fd: true}}
	defer fds.close(fd)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("bind %s: %w", c.Addr, err)
	}
	resp := make([]byte, c.ResponseSize)
	if typ == unix.SOCK_DGRAM {
		defer context.AfterFunc(ctx, fds.shutdown)()
		if ready != nil {
			close(ready)
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, 65536)
		for {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if ctx.Err() != nil {
				return nil
			}
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("receive: %w", err)
			}
			if n >= 4 && len(resp) >= 4 {
				copy(resp, buf[:4]) // the sequence number
			}
			if from != nil {
				_ = unix.Sendto(fd, resp, 0, from)
			}
		}
	}
	if err := unix.Listen(fd, 128); err != nil {
		return fmt.Errorf("listen %s: %w", c.Addr, err)
	}
	// Registered once listening: a listening socket's shutdown wakes accept.
	defer context.AfterFunc(ctx, fds.shutdown)()
	if ready != nil {
		close(ready)
	}
	var wg sync.WaitGroup
	defer func() {
		fds.shutdown() // after an accept error, wakes the connections still reading
		wg.Wait()
	}()
	for {
		cfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		if ctx.Err() != nil {
			if err == nil {
				unix.Close(cfd)
			}
			return nil
		}
		if err == unix.EINTR || err == unix.ECONNABORTED {
			continue
		}
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		_ = unix.SetsockoptInt(cfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		if !fds.add(cfd) {
			unix.Close(cfd)
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer fds.close(cfd)
			req := make([]byte, c.RequestSize)
			for {
				if _, err := readFull(cfd, req, nil); err != nil || writeAll(cfd, resp, nil) != nil || c.Mode == TCPCRR {
					return // with tcp-crr, the server closes first
				}
			}
		}()
	}
}

// errRunEnded stops a transaction that was still waiting when the run's
// time was up; it is not an error of the run.
var errRunEnded = errors.New("run ended")

// rrClient is one run of RRRun.
type rrClient struct {
	c                RRConfig
	ctx              context.Context
	sa               unix.Sockaddr
	req, resp        []byte
	h                *Histogram
	connect          *Histogram // tcp-crr: connect() to established
	secs             *rrBuckets // h, second by second
	measureFrom, end time.Time
	last             time.Time // completion of the last counted transaction
	timeouts         uint64
	start            time.Time // of the run
	completed        int       // transactions completed, warm-up included
	closes           int       // tcp-crr: connections the server closed after its response
}

// RRRun runs the client side and measures transactions and latency. A
// transaction's latency runs from its request's write (tcp-crr: from the
// connect) to the last byte of its response.
func RRRun(ctx context.Context, c RRConfig) (*RRResult, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = defaultConnectTimeout
	}
	sa, err := sockaddr(c.Addr)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := &rrClient{c: c, ctx: ctx, sa: sa, req: make([]byte, c.RequestSize), resp: make([]byte, max(c.ResponseSize, 65536)),
		h: NewHistogram(), connect: NewHistogram(), start: time.Now()}
	r.measureFrom = r.start.Add(c.Warmup)
	r.end = r.measureFrom.Add(c.Duration)
	r.secs = newRRBuckets(r.measureFrom, c.Duration)
	switch c.Mode {
	case TCPRR:
		err = r.tcp()
	case TCPCRR:
		err = r.crr()
	case UDPRR:
		err = r.udp()
	}
	if err != nil && !errors.Is(err, errRunEnded) {
		return nil, err
	}
	if r.h.Count() == 0 {
		return nil, fmt.Errorf("%s to %s: no transaction completed in %v", c.Mode, c.Addr, c.Duration)
	}
	stop := r.last // the clock stops at the last completion or the end, whichever is earlier
	if r.end.Before(stop) {
		stop = r.end
	}
	res := summarize(c, r.h, r.connect, stop.Sub(r.measureFrom), r.timeouts)
	res.Series = r.secs.series()
	return res, nil
}

// measured reports whether a transaction started at t0 counts.
func (r *rrClient) measured(t0 time.Time) bool { return !t0.Before(r.measureFrom) }

// done records a transaction started at t0 that just completed.
func (r *rrClient) done(t0 time.Time) {
	r.completed++
	if r.measured(t0) {
		r.last = time.Now()
		d := r.last.Sub(t0)
		r.h.Record(d)
		r.secs.record(r.last, d)
	}
}

// wait is the TCP modes' waitFunc: a slow transaction keeps waiting until
// ctx or the run ends, or nothing moved for stallTimeouts Timeouts.
func (r *rrClient) wait(stalls int) error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if !time.Now().Before(r.end) {
		return errRunEnded
	}
	if stalls >= stallTimeouts {
		return fmt.Errorf("%w: nothing moved for %v (%d timeouts of %v)", errStalled, time.Duration(stalls)*r.c.Timeout, stalls, r.c.Timeout)
	}
	return nil
}

// closeWait is tcp-crr's waitFunc for the server's close after its
// response: as wait, except that on the first connection one Timeout is
// enough to conclude that the server keeps connections open (a tcp-crr
// server closes at once, a tcp-rr server never does).
func (r *rrClient) closeWait(stalls int) error {
	if err := r.wait(stalls); err != nil || r.closes > 0 {
		return err
	}
	return errKeptOpen
}

// dial opens a blocking socket connected to the server. A TCP connect
// waits at most ConnectTimeout, checking ctx every Timeout.
func (r *rrClient) dial(typ int) (int, error) {
	fd, err := socket(domain(r.sa), typ, unix.SOCK_NONBLOCK, r.c.Timeout)
	if err != nil {
		return -1, err
	}
	err = unix.Connect(fd, r.sa)
	if err == unix.EINPROGRESS {
		err = r.connected(fd)
	}
	if err == nil && selfConnected(fd, r.sa) {
		// Nothing listens, and the kernel picked the server's port as
		// this socket's own: TCP's simultaneous open connected it to
		// itself, and it would answer its own requests.
		err = unix.ECONNREFUSED
	}
	if err == unix.ECONNREFUSED && r.starting() {
		unix.Close(fd)
		time.Sleep(startRetry)
		return r.dial(typ)
	}
	if err == nil {
		err = unix.SetNonblock(fd, false)
	}
	if err != nil {
		unix.Close(fd)
		if r.ctx.Err() != nil {
			return -1, err
		}
		return -1, r.explainRefused(fmt.Errorf("connect %s: %w", r.c.Addr, err))
	}
	return fd, nil
}

// selfConnected reports whether a connected socket's own address is its
// peer's.
func selfConnected(fd int, peer unix.Sockaddr) bool {
	local, err := unix.Getsockname(fd)
	if err != nil {
		return false
	}
	switch p := peer.(type) {
	case *unix.SockaddrInet4:
		l, ok := local.(*unix.SockaddrInet4)
		return ok && l.Addr == p.Addr && l.Port == p.Port
	case *unix.SockaddrInet6:
		l, ok := local.(*unix.SockaddrInet6)
		return ok && l.Addr == p.Addr && l.Port == p.Port
	}
	return false
}

// connected waits for a non-blocking connect to complete.
func (r *rrClient) connected(fd int) error {
	deadline := time.Now().Add(r.c.ConnectTimeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("timed out after %v; is a policy dropping it?", r.c.ConnectTimeout)
		}
		ms := int(min(left, r.c.Timeout).Milliseconds()) + 1 // rounded up
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, ms)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return err
		case n > 0:
			if soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil {
				return err
			} else if soErr != 0 {
				return unix.Errno(soErr)
			}
			return nil
		}
		if err := r.ctx.Err(); err != nil {
			return err
		}
	}
}

// tcp is tcp-rr: back-to-back transactions on one connection.
func (r *rrClient) tcp() error {
	fd, err := r.dial(unix.SOCK_STREAM)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for t0 := time.Now(); t0.Before(r.end); t0 = time.Now() {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		if err := writeAll(fd, r.req, r.wait); err != nil {
			return r.explain(fmt.Errorf("request: %w", err), 0)
		}
		if got, err := readFull(fd, r.resp[:r.c.ResponseSize], r.wait); err != nil {
			return r.explain(fmt.Errorf("response: %w", err), got)
		}
		r.done(t0)
		if r.completed == 1 || !r.measured(t0) {
			// The first and the warm-up transactions check that the
			// response was all the server sent (one syscall each).
			if n, _, _ := unix.Recvfrom(fd, r.resp, unix.MSG_PEEK|unix.MSG_DONTWAIT); n > 0 {
				return r.explain(fmt.Errorf("response: %w", errMoreData), 0)
			}
		}
	}
	return nil
}

// crr is tcp-crr: a connection per transaction. The latency runs from
// connect to the response, the connect latency from connect to the
// connection established; the client then reads until the server closes
// and resets the connection (no TIME_WAIT on either side).
func (r *rrClient) crr() error {
	for t0 := time.Now(); t0.Before(r.end); t0 = time.Now() {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		fd, err := r.dial(unix.SOCK_STREAM)
		if err != nil {
			return err
		}
		if r.measured(t0) {
			r.connect.Record(time.Since(t0))
		}
		err = writeAll(fd, r.req, r.wait)
		if err != nil {
			err = r.explain(fmt.Errorf("request: %w", err), 0)
		} else if got, rerr := readFull(fd, r.resp[:r.c.ResponseSize], r.wait); rerr != nil {
			err = r.explain(fmt.Errorf("response: %w", rerr), got)
		}
		if err == nil {
			r.done(t0)
			if err = readEOF(fd, r.resp, r.closeWait); err != nil {
				err = r.explain(fmt.Errorf("waiting for the server to close: %w", err), 0)
			} else {
				r.closes++
				// Close with a RST instead of a FIN: the server, in
				// FIN_WAIT2, then keeps no TIME_WAIT socket. Thousands a
				// second of those would soon hold the 4-tuples the
				// client's ephemeral ports come back to, and connects to
				// them stall (10 ms, or a 1 s SYN retransmission).
				_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
			}
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("transaction: %w", err)
		}
	}
	return nil
}

// udp is udp-rr: one datagram each way per transaction; a transaction
// whose response does not come within Timeout counts as a timeout.
func (r *rrClient) udp() error {
	fd, err := r.dial(unix.SOCK_DGRAM)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	numbered := r.c.RequestSize >= 4 && r.c.ResponseSize >= 4
	var seq uint32
	for t0 := time.Now(); t0.Before(r.end); t0 = time.Now() {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		seq++
		if numbered {
			binary.BigEndian.PutUint32(r.req, seq)
		}
		err := writeAll(fd, r.req, nil)
		ok := false
		if err != nil {
			err = fmt.Errorf("request: %w", err)
		} else if ok, err = r.udpResponse(fd, t0, numbered, seq); err != nil {
			err = fmt.Errorf("response: %w", err)
		}
		if errors.Is(err, unix.ECONNREFUSED) && r.starting() {
			time.Sleep(startRetry)
			continue
		}
		if err != nil {
			return r.explainRefused(err)
		}
		if ok {
			r.done(t0)
			continue
		}
		if r.measured(t0) {
			r.timeouts++
		}
		if !numbered {
			// Without numbers, a late response that came meanwhile would
			// pass for the next request's.
			drain(fd, r.resp)
		}
	}
	return nil
}

// udpResponse waits until t0+Timeout for the response to request seq
// (numbered: skipping late responses to earlier ones); false if it did not
// come.
func (r *rrClient) udpResponse(fd int, t0 time.Time, numbered bool, seq uint32) (bool, error) {
	shortened := false // SO_RCVTIMEO set to the rest of this transaction's time
	defer func() {
		if shortened {
			setTimeout(fd, unix.SO_RCVTIMEO, r.c.Timeout)
		}
	}()
	for {
		n, err := unix.Read(fd, r.resp)
		switch {
		case err == nil && n != r.c.ResponseSize:
			return false, r.mismatch(fmt.Errorf("a response of %d bytes, not %d", n, r.c.ResponseSize))
		case err == nil && (!numbered || n >= 4 && binary.BigEndian.Uint32(r.resp) == seq):
			return true, nil
		case isTimeout(err):
			return false, nil
		case err != nil && err != unix.EINTR:
			return false, err
		}
		// A late response or a signal: wait for the rest of the time.
		left := r.c.Timeout - time.Since(t0)
		if left <= 0 {
			return false, nil
		}
		setTimeout(fd, unix.SO_RCVTIMEO, left)
		shortened = true
	}
}

// drain discards the datagrams waiting on fd.
func drain(fd int, buf []byte) {
	for {
		_, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		if err != nil && err != unix.EINTR {
			return
		}
	}
}
