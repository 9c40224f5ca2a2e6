package traffic

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"io"
)

// The request/response tool uses blocking sockets, one OS thread each, as
// netperf does: a transaction's latency then includes the wake-up of a
// process sleeping in recv(), which is what netperf's TCP_RR figures of the
// seed studies contain. (Go's own network poller spins before sleeping,
// which measured about 5x lower round trips on loopback here than any
// blocking tool: a different quantity.)

func sockaddr(addr string) (unix.Sockaddr, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("address %q: want IPv4:port", addr)
	}
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, nil
}

// socket opens a blocking socket with the rr options: TCP_NODELAY for
// TCP, and the timeout on blocking reads and writes.
func socket(typ int, timeout time.Duration) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if typ == unix.SOCK_STREAM {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if timeout > 0 {
		tv := unix.NsecToTimeval(timeout.Nanoseconds())
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	}
	return fd, nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readFull reads len(b) bytes; io.EOF if the peer closed first.
func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.EOF
		}
		b = b[n:]
	}
	return nil
}

func isTimeout(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK)
}

// RRServe answers requests on c.Addr until ctx ends: TCP connections get
// a response of ResponseSize bytes for every RequestSize bytes read; UDP
// datagrams get one response datagram each. ready, if not nil, is closed
// once the socket listens.
func RRServe(ctx context.Context, c RRConfig, ready chan<- struct{}) error {
	sa, err := sockaddr(c.Addr)
	if err != nil {
		return err
	}
	typ := unix.SOCK_STREAM
	if c.Mode == UDPRR {
		typ = unix.SOCK_DGRAM
	}
	fd, err := socket(typ, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("bind %s: %w", c.Addr, err)
	}
	resp := make([]byte, c.ResponseSize)
	var mu sync.Mutex
	open := map[int]bool{fd: true}
	stopped := false
	go func() {
		<-ctx.Done()
		mu.Lock()
		stopped = true
		for f := range open {
			_ = unix.Shutdown(f, unix.SHUT_RDWR) // wakes blocked accept, recv
		}
		mu.Unlock()
	}()
	if typ == unix.SOCK_DGRAM {
		if ready != nil {
			close(ready)
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, 65536)
		for {
			_, from, err := unix.Recvfrom(fd, buf, 0)
			if ctx.Err() != nil {
				return nil
			}
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if from != nil {
				_ = unix.Sendto(fd, resp, 0, from)
			}
		}
	}
	if err := unix.Listen(fd, 128); err != nil {
		return err
	}
	if ready != nil {
		close(ready)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
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
			return err
		}
		_ = unix.SetsockoptInt(cfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		mu.Lock()
		if stopped {
			mu.Unlock()
			unix.Close(cfd)
			return nil
		}
		open[cfd] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer func() { mu.Lock(); delete(open, cfd); mu.Unlock(); unix.Close(cfd) }()
			req := make([]byte, c.RequestSize)
			for readFull(cfd, req) == nil && writeAll(cfd, resp) == nil {
			}
		}()
	}
}

// RRRun runs the client side and measures transactions and latency.
func RRRun(ctx context.Context, c RRConfig) (*RRResult, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Timeout == 0 {
		c.Timeout = time.Second
	}
	sa, err := sockaddr(c.Addr)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	req := make([]byte, c.RequestSize)
	resp := make([]byte, max(c.ResponseSize, 65536))
	h := NewHistogram()
	var timeouts uint64
	measureFrom := time.Now().Add(c.Warmup)
	end := measureFrom.Add(c.Duration)
	record := func(t0 time.Time) {
		if !t0.Before(measureFrom) {
			h.Record(time.Since(t0))
		}
	}
	dial := func(typ int) (int, error) {
		fd, err := socket(typ, c.Timeout)
		if err != nil {
			return -1, err
		}
		if err := unix.Connect(fd, sa); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("connect %s: %w", c.Addr, err)
		}
		return fd, nil
	}
	switch c.Mode {
	case TCPRR, UDPRR:
		typ := unix.SOCK_STREAM
		if c.Mode == UDPRR {
			typ = unix.SOCK_DGRAM
		}
		fd, err := dial(typ)
		if err != nil {
			return nil, err
		}
		defer unix.Close(fd)
		for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := writeAll(fd, req); err != nil {
				return nil, fmt.Errorf("request: %w", err)
			}
			if typ == unix.SOCK_DGRAM {
				if _, err := unix.Read(fd, resp); err != nil {
					if isTimeout(err) || err == unix.EINTR {
						timeouts++
						continue
					}
					return nil, fmt.Errorf("response: %w", err)
				}
			} else if err := readFull(fd, resp[:c.ResponseSize]); err != nil {
				return nil, fmt.Errorf("response: %w", err)
			}
			record(t0)
		}
	case TCPCRR:
		for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			fd, err := dial(unix.SOCK_STREAM)
			if err != nil {
				return nil, err
			}
			err = writeAll(fd, req)
			if err == nil {
				err = readFull(fd, resp[:c.ResponseSize])
			}
			unix.Close(fd)
			if err != nil {
				return nil, fmt.Errorf("transaction: %w", err)
			}
			record(t0)
		}
	}
	elapsed := time.Since(measureFrom)
	if h.Count() == 0 {
		return nil, fmt.Errorf("%s to %s: no transaction completed in %v", c.Mode, c.Addr, c.Duration)
	}
	return summarize(c, h, elapsed, timeouts), nil
}
