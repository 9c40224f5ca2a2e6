package traffic

import (
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"
)

// The request/response protocol carries no header: client and server only
// agree on the mode and sizes because they were given the same ones. When
// they were not, the client sees one of a few symptoms, and says which
// disagreement explains it:
//
//   - more bytes than the response size (the server's response is larger,
//     or its request smaller): detected after the first transaction and
//     during the warm-up (tcp-rr), while waiting for the close (tcp-crr),
//     or from the datagram's length (udp-rr);
//   - fewer bytes, or none, then a stall (the server's response is
//     smaller, or its request larger: it is still waiting for the rest);
//   - a server that closes after one response (a tcp-crr server under a
//     tcp-rr client), or that keeps the connection open after it (a
//     tcp-rr server under a tcp-crr client: found after one Timeout);
//   - a refused connection or datagram (nothing listens for that
//     protocol: a udp-rr server under a TCP client, or the reverse).

var (
	// errStalled ends a TCP run in which nothing moved for stallTimeouts
	// Timeouts.
	errStalled = errors.New("stalled")
	// errKeptOpen: a tcp-crr client's first connection was not closed by
	// the server within a Timeout of its response.
	errKeptOpen = errors.New("the server kept the connection open after its response, as a tcp-rr server does")
)

// A server started at the same moment as its client (`cnlab exec ... &`)
// may not listen yet: until a first transaction completes, for at most
// startGrace, a refused connection or datagram is tried again every
// startRetry.
const (
	startGrace = time.Second
	startRetry = 10 * time.Millisecond
)

// starting reports whether a refusal may be a server still starting.
func (r *rrClient) starting() bool {
	return r.completed == 0 && time.Since(r.start) < startGrace && r.ctx.Err() == nil
}

// mismatch adds to err that the server's mode or sizes likely differ
// from this client's.
func (r *rrClient) mismatch(err error) error {
	return fmt.Errorf("%w: the server's mode or sizes likely differ from this client's (%s, request %d B, response %d B); give both the same",
		err, r.c.Mode, r.c.RequestSize, r.c.ResponseSize)
}

// explain adds the likely cause to a TCP transaction's error when a mode
// or size mismatch explains it; got is how many response bytes came.
func (r *rrClient) explain(err error, got int) error {
	if r.ctx.Err() != nil {
		return err
	}
	stalled := errors.Is(err, errStalled)
	if errors.Is(err, errRunEnded) {
		if r.completed > 0 {
			return err
		}
		// The run ended before its first transaction did: a stall too.
		err, stalled = fmt.Errorf("no transaction completed in %v", r.c.Warmup+r.c.Duration), true
	}
	closed := errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)
	switch {
	case errors.Is(err, errMoreData) || errors.Is(err, errKeptOpen):
		return r.mismatch(err)
	case stalled && got > 0:
		return r.mismatch(fmt.Errorf("%w: only %d of the %d response bytes came", err, got, r.c.ResponseSize))
	case stalled && r.completed == 0:
		return r.mismatch(fmt.Errorf("%w: no response to the first request (a server answers only a whole request)", err))
	case closed && r.c.Mode == TCPRR && r.completed > 0:
		return r.mismatch(fmt.Errorf("%w: the server closed the connection after a response, as a tcp-crr server does", err))
	case closed:
		return r.mismatch(fmt.Errorf("%w: the server closed the connection before its response", err))
	}
	return err
}

// explainRefused adds to a refused connection or datagram that nothing
// listens there for this mode's protocol.
func (r *rrClient) explainRefused(err error) error {
	if !errors.Is(err, unix.ECONNREFUSED) {
		return err
	}
	proto, other := "TCP (tcp-rr, tcp-crr)", "a udp-rr server takes no connections"
	if r.c.Mode == UDPRR {
		proto, other = "UDP (udp-rr)", "a tcp-rr or tcp-crr server takes no datagrams"
	}
	return fmt.Errorf("%w: no %s server listens on %s: is it running, in the client's mode? (%s)", err, proto, r.c.Addr, other)
}
