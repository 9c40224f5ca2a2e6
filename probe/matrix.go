package probe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
	"golang.org/x/sys/unix"
)

// How the matrix is probed (docs/policy.md, "The probe at scale"):
//
//   - Sockets are opened inside a source endpoint's namespace, all of that
//     endpoint's at once (one namespace switch per source and wave, not
//     one per attempt); connecting, sending and waiting happen outside it,
//     on Go's poller: a socket keeps the namespace it was made in.
//   - Every attempt is launched at once (up to the descriptors the process
//     may open), so the timeout is paid once in wall time, not once per
//     batch of attempts.
//   - Each attempt runs its full timeout before it counts as denied, from
//     the moment its SYN or first datagram left. A reply (a completed
//     handshake, an echo of the datagram's nonce) is proof of "allowed";
//     only "denied" can be wrong, when an answer was merely slow. So the
//     probe measures the slowest answer of the allowed attempts, and when
//     the timeout was not at least `margin` times that, probes every
//     denied cell again with a timeout that is.
//   - UDP: one socket per source and target sends to every destination and
//     takes the echoes; a datagram unanswered after a third of the timeout
//     is sent again (three tries in all).

// margin is how many times the slowest answer the timeout of a denied
// attempt must be.
const margin = 4

// maxTimeout bounds the timeout the margin may ask for.
const maxTimeout = 30 * time.Second

// job is one cell to probe.
type job struct {
	src, dst *topology.Endpoint
	t        Target
	// fam is the address family probed; srcIP and dstIP the endpoints'
	// addresses of that family.
	fam          int
	srcIP, dstIP netip.Addr
}

// outcome is what one attempt saw.
type outcome struct {
	allowed bool
	rtt     time.Duration // time to the answer, when allowed
	err     error         // neither an answer nor a clean timeout
	// udpLocal is the UDP socket's address, for forgetUDP.
	udpLocal netip.AddrPort
}

// Stats say how a matrix was probed.
type Stats struct {
	Cells    int           // cells probed
	Parallel int           // attempts in flight at most
	Timeout  time.Duration // timeout of the first pass
	Slowest  time.Duration // slowest answer of an allowed attempt, any pass
	// Reprobed cells came out denied with a timeout under margin times
	// the slowest answer, and were probed again with RetryTimeout.
	Reprobed     int
	RetryTimeout time.Duration
	// Changed is how many of the reprobed cells were answered the second
	// time (a first verdict that would have been wrong).
	Changed int
}

// probeAll runs every job with the given timeout and at most parallel
// attempts in flight.
func probeAll(ctx context.Context, jobs []job, timeout time.Duration, parallel int) []outcome {
	out := make([]outcome, len(jobs))
	// Every namespace the probe has sockets in stays open here while it
	// runs: no thread of the probe waits inside one, and a socket alone
	// does not show who holds a namespace, so without these `cnlab down`
	// would not find the probe to stop it, and the namespaces would
	// outlive their lab.
	held := map[string]bool{}
	for _, jb := range jobs {
		for _, ns := range []string{jb.src.Netns, jb.dst.Netns} {
			if held[ns] {
				continue
			}
			held[ns] = true
			if h, err := netns.Open(ns); err == nil {
				defer h.Close()
			}
		}
	}
	// Group the jobs by source and target protocol, in order.
	type group struct {
		src   *topology.Endpoint
		proto string
		port  int
		fam   int
		idx   []int
	}
	var groups []*group
	at := map[[3]any]*group{}
	for i, jb := range jobs {
		k := [3]any{jb.src, jb.t, jb.fam}
		g := at[k]
		if g == nil {
			g = &group{src: jb.src, proto: jb.t.Protocol, port: jb.t.Port, fam: jb.fam}
			at[k] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	// tokens bound the sockets open at once: a TCP attempt holds one, a
	// UDP group one. Tokens are taken under acquireMu, a group's (or a
	// chunk's) all at once, so two groups never each hold part of what
	// they need while nothing else is in flight to free some.
	tokens := make(chan struct{}, parallel)
	var acquireMu sync.Mutex
	acquire := func(n int) {
		acquireMu.Lock()
		for i := 0; i < n; i++ {
			tokens <- struct{}{}
		}
		acquireMu.Unlock()
	}
	release := func() { <-tokens }

	var wg sync.WaitGroup
	work := make(chan *group)
	const launchers = 4 // open and connect in parallel on a 2-vCPU machine and up
	var lwg sync.WaitGroup
	for w := 0; w < launchers; w++ {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			for g := range work {
				if g.proto == "udp" {
					acquire(1)
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer release()
						udpGroup(ctx, g.src, g.port, g.fam, jobs, g.idx, out, timeout)
					}()
					continue
				}
				for len(g.idx) > 0 && ctx.Err() == nil {
					n := min(len(g.idx), parallel)
					chunk := g.idx[:n]
					g.idx = g.idx[n:]
					acquire(n)
					tcpChunk(ctx, g.src, g.fam, jobs, chunk, out, timeout, &wg, release)
				}
			}
		}()
	}
	for _, g := range groups {
		work <- g
	}
	close(work)
	lwg.Wait()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		for i := range out {
			if !out[i].allowed && out[i].err == nil {
				out[i].err = err
			}
		}
	}
	return out
}

// tcpChunk opens one TCP socket per job in src's namespace, then connects
// each and waits for it on its own goroutine (counted in wg; release is
// called once per job when its socket is closed).
func tcpChunk(ctx context.Context, src *topology.Endpoint, fam int, jobs []job, idx []int, out []outcome, timeout time.Duration, wg *sync.WaitGroup, release func()) {
	fds := make([]int, len(idx))
	for i := range fds {
		fds[i] = -1
	}
	err := netns.Do(src.Netns, func() error {
		for i, k := range idx {
			fd, err := unix.Socket(afOf(fam), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open a tcp socket in %s: %w", src.ID(), err)
			}
			fds[i] = fd
			if fam == 6 {
				// The source's own address of the family, as UDP does.
				if err := unix.Bind(fd, sockaddr(jobs[k].srcIP, 0)); err != nil {
					return fmt.Errorf("bind a tcp socket in %s to %s: %w", src.ID(), jobs[k].srcIP, err)
				}
			}
		}
		return nil
	})
	for i, k := range idx {
		if err != nil {
			if fds[i] >= 0 {
				unix.Close(fds[i])
			}
			out[k].err = err
			release()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			out[k] = connectTCP(ctx, fds[i], netip.AddrPortFrom(jobs[k].dstIP, uint16(jobs[k].t.Port)), timeout)
		}()
	}
}

// connectTCP connects the non-blocking socket fd to dst and waits for the
// handshake until the timeout, counted from the SYN. It closes fd.
func connectTCP(ctx context.Context, fd int, dst netip.AddrPort, timeout time.Duration) outcome {
	start := time.Now()
	err := unix.Connect(fd, sockaddr(dst.Addr(), int(dst.Port())))
	if err == nil {
		unix.Close(fd)
		return outcome{allowed: true, rtt: time.Since(start)}
	}
	if !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(fd)
		return outcome{err: classify(os.NewSyscallError("connect", err))}
	}
	f := os.NewFile(uintptr(fd), "probe")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return outcome{err: err}
	}
	if err := f.SetWriteDeadline(start.Add(timeout)); err != nil {
		return outcome{err: fmt.Errorf("socket deadline: %w", err)}
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var res outcome
	done := func(fd uintptr) bool {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			res.err = os.NewSyscallError("getsockopt", err)
			return true
		}
		switch e := unix.Errno(v); e {
		case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
			return false
		case 0:
			if _, err := unix.Getpeername(int(fd)); err != nil {
				return false // still connecting
			}
			res = outcome{allowed: true, rtt: time.Since(start)}
			return true
		default:
			res.err = classify(os.NewSyscallError("connect", e))
			return true
		}
	}
	werr := rc.Write(done)
	if werr != nil {
		// The deadline passed: one last look, then a clean timeout (or
		// the context's end).
		_ = rc.Control(func(fd uintptr) { done(fd) })
		if !res.allowed && res.err == nil && !errors.Is(werr, os.ErrDeadlineExceeded) {
			res.err = werr
		}
		if !res.allowed && res.err == nil && ctx.Err() != nil {
			res.err = ctx.Err()
		}
	}
	return res
}

// udpGroup sends a datagram from one socket in src's namespace to the
// probe's UDP listener of every job's destination and waits for the
// echoes; an unanswered datagram is sent again after a third of the
// timeout, three tries in all.
func udpGroup(ctx context.Context, src *topology.Endpoint, port, fam int, jobs []job, idx []int, out []outcome, timeout time.Duration) {
	fail := func(err error) {
		for _, k := range idx {
			out[k].err = err
		}
	}
	var fd = -1
	err := netns.Do(src.Netns, func() error {
		var err error
		fd, err = unix.Socket(afOf(fam), unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open a udp socket in %s: %w", src.ID(), err)
		}
		// Room for every echo at once: a lost echo would be a false
		// "denied".
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		if err := unix.Bind(fd, sockaddr(jobs[idx[0]].srcIP, 0)); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind a udp socket in %s: %w", src.ID(), err)
		}
		return nil
	})
	if err != nil {
		fail(err)
		return
	}
	f := os.NewFile(uintptr(fd), "probe-udp")
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		fail(err)
		return
	}
	defer pc.Close()
	local := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	// Each destination gets its own nonce; a reply counts only from the
	// destination's address and port, with its nonce.
	msgs := make(map[netip.AddrPort]int, len(idx)) // destination -> job
	payload := make([]string, len(idx))
	for i, k := range idx {
		dst := netip.AddrPortFrom(jobs[k].dstIP, uint16(port))
		msgs[dst] = i
		nonce := make([]byte, 8)
		_, _ = rand.Read(nonce)
		payload[i] = "cnlab-probe " + hex.EncodeToString(nonce)
		out[k].udpLocal = local
	}
	var mu sync.Mutex
	answered := make([]bool, len(idx))
	sent := make([]time.Time, len(idx))
	_ = pc.SetReadDeadline(time.Now().Add(maxTimeout + timeout)) // set for real once the first sends are out
	stop := context.AfterFunc(ctx, func() { _ = pc.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if isTimeout(err) || errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
					return
				}
				continue // an ICMP error queued on the socket, say: the datagram's own timeout decides
			}
			ua, ok := from.(*net.UDPAddr)
			if !ok {
				continue
			}
			ap := netip.AddrPortFrom(ua.AddrPort().Addr().Unmap(), ua.AddrPort().Port())
			i, ok := msgs[ap]
			if !ok || string(buf[:n]) != payload[i] {
				continue
			}
			mu.Lock()
			if !answered[i] {
				answered[i] = true
				out[idx[i]].allowed = true
				out[idx[i]].rtt = time.Since(sent[i])
			}
			mu.Unlock()
		}
	}()
	// The timeout runs from the end of the first round of sends (each
	// datagram gets at least its full timeout); the second and third tries
	// go out a third and two thirds of the way.
	var first time.Time
	const tries = 3
	for try := 0; try < tries && ctx.Err() == nil; try++ {
		for i, k := range idx {
			mu.Lock()
			skip := answered[i]
			if try == 0 {
				sent[i] = time.Now()
			}
			mu.Unlock()
			if skip {
				continue
			}
			dst := &net.UDPAddr{IP: jobs[k].dstIP.AsSlice(), Port: port}
			if _, err := pc.WriteTo([]byte(payload[i]), dst); err != nil {
				mu.Lock()
				if out[k].err == nil && !answered[i] {
					out[k].err = classify(err)
				}
				mu.Unlock()
			}
		}
		if try == 0 {
			first = time.Now()
			_ = pc.SetReadDeadline(first.Add(timeout))
		}
		if try < tries-1 {
			select {
			case <-time.After(time.Until(first.Add(timeout * time.Duration(try+1) / tries))):
			case <-ctx.Done():
			case <-readDone:
			}
		}
	}
	<-readDone
	mu.Lock()
	defer mu.Unlock()
	for i, k := range idx {
		if answered[i] {
			out[k].err = nil // a send error on an earlier try, answered since
		}
	}
}

// afOf is the socket address family of IP family fam (4 or 6).
func afOf(fam int) int {
	if fam == 6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// sockaddr is a's socket address with port.
func sockaddr(a netip.Addr, port int) unix.Sockaddr {
	if a.Is4() || a.Is4In6() {
		return &unix.SockaddrInet4{Port: port, Addr: a.Unmap().As4()}
	}
	return &unix.SockaddrInet6{Port: port, Addr: a.As16()}
}
