package l7proxy

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// upConn is a connection to a server, held by one client connection at a
// time, and pooled between them per source identity and destination, as
// Cilium's proxy pools its upstream connections per identity.
type upConn struct {
	key    poolKey
	c      net.Conn
	rw     io.ReadWriter // c's reads and writes (socketIO)
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool      // it carried a request already
	idle   time.Time // when it went back to the pool
}

type poolKey struct {
	id  uint32
	dst netip.AddrPort
}

// Bounds of the pool: idle connections kept per identity and
// destination, and how long one is kept (the bounds Go's transport had
// in the proxy before: MaxIdleConnsPerHost 64, IdleConnTimeout 1 min).
const (
	maxIdlePerKey = 64
	poolIdle      = time.Minute
)

// upPool holds the idle upstream connections.
type upPool struct {
	mu   sync.Mutex
	idle map[poolKey][]*upConn
}

// get returns an idle connection of key, or dials a new one.
func (p *upPool) get(k poolKey) (*upConn, error) {
	p.mu.Lock()
	for l := p.idle[k]; len(l) > 0; l = p.idle[k] {
		u := l[len(l)-1]
		p.idle[k] = l[:len(l)-1]
		if time.Since(u.idle) > poolIdle || !alive(u.c) {
			_ = closeSocket(u.c, u.rw)
			continue
		}
		p.mu.Unlock()
		u.buffers()
		return u, nil
	}
	p.mu.Unlock()
	d := net.Dialer{Timeout: 5 * time.Second, Control: sockopts(false)}
	network := "tcp4"
	if k.dst.Addr().Is6() {
		network = "tcp6" // the connection's own family: an IPv6 client's server is dialled over IPv6
	}
	c, err := d.Dial(network, k.dst.String())
	if err != nil {
		return nil, err
	}
	u := &upConn{key: k, c: c, rw: socketIO(c)}
	u.buffers()
	return u, nil
}

// buffers gives the connection its buffers (released while it is idle).
func (u *upConn) buffers() {
	if u.br == nil {
		u.br = getReader(u.rw)
	}
	if u.bw == nil {
		u.bw = getWriter(u.rw)
	}
}

// put returns a connection to the pool (or closes it: the pool is full,
// or it holds bytes no request asked for).
func (p *upPool) put(u *upConn) {
	release(&u.br, &u.bw)
	if u.br != nil || u.bw != nil {
		_ = closeSocket(u.c, u.rw)
		return
	}
	u.idle = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = map[poolKey][]*upConn{}
	}
	if len(p.idle[u.key]) >= maxIdlePerKey {
		_ = closeSocket(u.c, u.rw)
		return
	}
	p.idle[u.key] = append(p.idle[u.key], u)
}

// sweep closes the connections idle for longer than the pool keeps them.
func (p *upPool) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, l := range p.idle {
		kept := l[:0]
		for _, u := range l {
			if time.Since(u.idle) > poolIdle {
				_ = closeSocket(u.c, u.rw)
				continue
			}
			kept = append(kept, u)
		}
		if len(kept) == 0 {
			delete(p.idle, k)
		} else {
			p.idle[k] = kept
		}
	}
}

// closeAll closes every idle connection.
func (p *upPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.idle {
		for _, u := range l {
			_ = closeSocket(u.c, u.rw)
		}
	}
	p.idle = nil
}

// alive reports whether an idle connection is still open and silent: the
// server may have closed it (or written to it) while it was idle.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		ok = err == unix.EAGAIN
		return true
	})
	return ok
}
