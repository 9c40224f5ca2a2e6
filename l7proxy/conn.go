package l7proxy

// One client connection, served on one goroutine: each request is read,
// judged, written upstream, and its answer read and written back by the
// same goroutine, on an upstream connection the client connection keeps
// (issue 36). net/http's server and Transport, which the proxy used
// before, hand every request between three goroutines (the server's
// connection, the Transport's write and read loops); on this 2-vCPU VM
// those hand-offs, one cross-CPU wakeup each, were most of the proxy's
// cost (BENCHMARKS.md, "L7 HTTP policy").
//
// The request is parsed by net/http (http.ReadRequest, with the checks
// Go's server adds: Host, header names and values, transfer codings),
// written upstream as Go's transport wrote it (request line, Host,
// User-Agent, framing, then the header sorted), and the answer written
// back as Go's server wrote ReverseProxy's (hop-by-hop headers removed,
// Go's reason phrase, a Date, chunked when its length is unknown).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/cnlab/cnlab/l7"
)

// clientConn is one client connection and the upstream connection it
// holds.
type clientConn struct {
	p   *Proxy
	c   net.Conn
	rw  io.ReadWriter // c's reads and writes (socketIO)
	ci  *connInfo
	lim Limits
	lr  *limitReader
	br  *bufio.Reader
	bw  *bufio.Writer
	up  *upConn
}

// limitReader reads the client connection, at most remain bytes while a
// request head is read (Limits.MaxHeaderBytes; -1: no limit, for
// bodies).
type limitReader struct {
	c      io.Reader
	remain int64
	hit    bool
	// first is a byte read while the connection was idle with no buffer.
	first    [1]byte
	hasFirst bool
}

func (l *limitReader) Read(b []byte) (int, error) {
	if l.hasFirst && len(b) > 0 {
		b[0], l.hasFirst = l.first[0], false
		if l.remain > 0 {
			l.remain--
		}
		return 1, nil
	}
	if l.remain == 0 {
		l.hit = true
		return 0, errHeadTooLarge
	}
	if l.remain > 0 && int64(len(b)) > l.remain {
		b = b[:l.remain]
	}
	n, err := l.c.Read(b)
	if l.remain > 0 {
		l.remain -= int64(n)
	}
	return n, err
}

var errHeadTooLarge = errors.New("request head too large")

// Buffers: a connection holds them only while it serves a request (an
// idle keep-alive connection costs its goroutine and its sockets).
var (
	bufPool    = sync.Pool{New: func() any { return make([]byte, 32<<10) }}
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

func getReader(r io.Reader) *bufio.Reader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func getWriter(w io.Writer) *bufio.Writer {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(w)
	return bw
}

// release returns a reader and a writer holding nothing to their pools
// (nil for those that hold bytes still, or are nil).
func release(br **bufio.Reader, bw **bufio.Writer) {
	if *br != nil && (*br).Buffered() == 0 {
		(*br).Reset(nil)
		readerPool.Put(*br)
		*br = nil
	}
	if *bw != nil && (*bw).Buffered() == 0 {
		(*bw).Reset(nil)
		writerPool.Put(*bw)
		*bw = nil
	}
}

// serveConn serves a client connection until it ends.
func (p *Proxy) serveConn(c net.Conn, ci *connInfo) {
	cc := &clientConn{p: p, c: c, rw: socketIO(c), ci: ci, lim: p.limits()}
	cc.lr = &limitReader{c: cc.rw, remain: -1}
	defer cc.close()
	for cc.serveOne() {
		cc.lim = p.limits()
	}
}

func (cc *clientConn) close() {
	if cc.up != nil {
		cc.p.pool.put(cc.up)
		cc.up = nil
	}
	if r, ok := cc.rw.(*rawIO); ok && r.writeFailed {
		// An answer the client did not take (its write timed out): reset
		// the connection rather than keep the rest in the kernel.
		if tc, ok := cc.c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	release(&cc.br, &cc.bw)
	_ = closeSocket(cc.c, cc.rw)
}

// serveOne serves one request; false ends the connection.
func (cc *clientConn) serveOne() bool {
	// Idle: wait for the next request's first byte, with no buffer held
	// when none holds a byte of it already.
	release(&cc.br, &cc.bw)
	if cc.up != nil {
		release(&cc.up.br, &cc.up.bw)
	}
	_ = cc.c.SetReadDeadline(deadline(cc.lim.IdleTimeout))
	if cc.br == nil {
		if _, err := io.ReadFull(cc.rw, cc.lr.first[:]); err != nil {
			return false
		}
		cc.lr.hasFirst = true
		cc.br = getReader(cc.lr)
	} else if _, err := cc.br.Peek(1); err != nil {
		return false
	}
	if cc.bw == nil {
		cc.bw = getWriter(cc.rw)
	}
	if cc.up != nil {
		cc.up.buffers()
	}
	start := time.Now()
	_ = cc.c.SetReadDeadline(deadline(cc.lim.HeaderTimeout))
	cc.lr.remain = int64(cc.lim.MaxHeaderBytes) - int64(cc.br.Buffered())
	if cc.lr.remain <= 0 {
		cc.lr.remain = 1
	}
	r, err := http.ReadRequest(cc.br)
	hit := cc.lr.hit
	cc.lr.remain, cc.lr.hit = -1, false
	if err != nil {
		cc.refuse(err, hit)
		return false
	}
	if err := checkRequest(r, cc.lim); err != nil {
		cc.refuse(err, false)
		return false
	}
	// The body's bytes may each wait up to IdleTimeout (a client that
	// stops sending its body is closed then).
	_ = cc.c.SetReadDeadline(time.Time{})
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &idleBody{ReadCloser: r.Body, c: cc.c, idle: cc.lim.IdleTimeout}
	}
	return cc.handle(r, start)
}

// idleBody is a request body whose every read waits at most idle.
type idleBody struct {
	io.ReadCloser
	c    net.Conn
	idle time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	_ = b.c.SetReadDeadline(deadline(b.idle))
	return b.ReadCloser.Read(p)
}

func deadline(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// statusError is a request refused before it is judged.
type statusError struct {
	code int
	text string
}

func (e statusError) Error() string { return e.text }

// checkRequest makes the checks Go's server makes on a request
// http.ReadRequest accepted, and the proxy's limit on header lines.
func checkRequest(r *http.Request, lim Limits) error {
	if r.ProtoMajor != 1 {
		return statusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	}
	// http.ReadRequest moved the Host header to r.Host (it refused
	// several); an absolute-form target's authority is r.Host instead.
	if r.ProtoAtLeast(1, 1) && r.Host == "" && r.Method != "CONNECT" {
		return statusError{http.StatusBadRequest, "missing required Host header"}
	}
	if r.Host != "" && !r.URL.IsAbs() && !httpguts.ValidHostHeader(r.Host) {
		return statusError{http.StatusBadRequest, "malformed Host header"}
	}
	n := 0
	for k, vv := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return statusError{http.StatusBadRequest, "invalid header name"}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return statusError{http.StatusBadRequest, "invalid header value"}
			}
		}
		n += len(vv)
	}
	if lim.MaxHeaders > 0 && n > lim.MaxHeaders {
		return errTooManyHeaders
	}
	if expectsContinue(r) {
		return nil
	}
	if len(r.Header["Expect"]) > 0 {
		return statusError{http.StatusExpectationFailed, ""}
	}
	return nil
}

var errTooManyHeaders = errors.New("too many header lines")

func expectsContinue(r *http.Request) bool {
	return httpguts.HeaderValuesContainsToken(r.Header["Expect"], "100-continue")
}

// refuse answers a request that could not be read, as Go's server does,
// and the connection ends.
func (cc *clientConn) refuse(err error, tooLarge bool) {
	var se statusError
	var line, body string
	switch {
	case tooLarge || errors.Is(err, errTooManyHeaders):
		line, body = "431 Request Header Fields Too Large", "431 Request Header Fields Too Large"
		cc.p.count(LogEntry{Verdict: "denied", Status: http.StatusRequestHeaderFieldsTooLarge})
	case errors.As(err, &se) && se.code == http.StatusExpectationFailed:
		line = "417 Expectation Failed"
	case errors.As(err, &se):
		line = fmt.Sprintf("%d %s: %s", se.code, http.StatusText(se.code), se.text)
		body = line
	case strings.Contains(err.Error(), "unsupported transfer encoding"):
		line, body = "501 Not Implemented", "Unsupported transfer encoding"
	case isNetReadError(err):
		return // no reply
	default:
		line, body = "400 Bad Request", "400 Bad Request"
	}
	_ = cc.c.SetWriteDeadline(deadline(cc.lim.WriteTimeout))
	fmt.Fprintf(cc.bw, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n%s", line, body)
	_ = cc.bw.Flush()
	if tooLarge {
		// Let the client read the answer before the reset its unread
		// bytes would cause.
		if tc, ok := cc.c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			_ = cc.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			_, _ = io.CopyN(io.Discard, cc.lr, 256<<10)
		}
	}
}

// isNetReadError: the connection ended or timed out while its request
// was read (Go's server answers nothing then).
func isNetReadError(err error) bool {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "read"
}

// handle judges a request and answers it; false ends the connection.
func (cc *clientConn) handle(r *http.Request, start time.Time) bool {
	p, ci := cc.p, cc.ci
	cur := p.cur.Load()
	id, known := uint32(0), false
	var pp *portPolicy
	if cur != nil {
		id, known = cur.ids[ci.src.Addr()]
		pp = cur.ports[ci.dst]
	}
	// The request-target as Envoy's :path (forwardable false: the proxy
	// answers 400 to it).
	path, forwardable := target(r)
	if r.Host == "" {
		// An HTTP/1.0 request without Host goes out with the
		// destination as Host: judged so.
		r.Host = ci.dst.String()
	}
	// The header judged is the header forwarded.
	l7.ForwardHeader(r.Header, r.Host, ci.src.Addr())
	e := LogEntry{Time: start.UTC(), Src: ci.src.String(), Dst: ci.dst.String(), Identity: id, Method: r.Method, Path: path, Host: r.Host}
	req := l7.Request{Method: r.Method, Path: path, Host: r.Host, Header: r.Header}
	allowed := ci.err == nil && cur != nil
	switch {
	case !allowed:
	case pp != nil:
		m := pp.matcher(ci.src.Addr(), id, known)
		allowed = m != nil && m.Allows(req)
	case !cur.seen[ci.dst]:
		// A destination that never was an L7 port (the proxy's own
		// address, say) gets nothing.
		allowed = false
	case !ci.allowsL4(cur):
		// A port that is no longer an L7 port (its policy changed while
		// this connection was open), and L3/L4 no longer allows the
		// connection: it ends, as the datapath would refuse it now.
		e.Verdict = "closed"
		p.done(e, start)
		return false
	default:
		// A port that is no longer an L7 port, and L3/L4 still allows
		// the connection: its requests pass, as a new connection's would.
	}
	var out string
	if allowed && forwardable {
		out = forwardTarget(path)
	}
	switch {
	case allowed && out == "":
		keep := cc.answer(r, http.StatusBadRequest, errorHeader, "request-target cannot be forwarded unchanged\n")
		e.Verdict, e.Status = "denied", http.StatusBadRequest
		p.done(e, start)
		return keep
	case !allowed:
		keep := cc.answer(r, http.StatusForbidden, deniedHeader, DeniedBody)
		e.Verdict, e.Status = "denied", http.StatusForbidden
		p.done(e, start)
		return keep
	}
	if p.forwarding != nil {
		p.forwarding(req)
	}
	status, keep, upErr := cc.forward(r, out, id)
	e.Verdict, e.Status = "allowed", status
	if upErr {
		e.Verdict = "upstream-error"
	}
	p.done(e, start)
	return keep
}

// Headers of the answers the proxy writes itself.
var (
	deniedHeader = "Content-Type: text/plain\r\n"
	errorHeader  = "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"
)

// maxDiscard is how much of an unjudged request body the proxy reads to
// keep a connection after answering it itself (Go's server's 256 KiB).
const maxDiscard = 256 << 10

// answer writes the proxy's own answer to r (header: lines ending in
// CRLF) and reads r's body away; false ends the connection.
func (cc *clientConn) answer(r *http.Request, status int, header, body string) bool {
	keep := !r.Close
	// A body the client waits to send (Expect: 100-continue), or too long
	// to read away: the connection ends after the answer.
	if r.ContentLength != 0 && (expectsContinue(r) || r.ContentLength > maxDiscard) {
		keep = false
	}
	_ = cc.c.SetWriteDeadline(deadline(cc.lim.WriteTimeout))
	bw := cc.bw
	writeStatusLine(bw, r, status)
	bw.WriteString(header)
	bw.WriteString("Content-Length: ")
	bw.WriteString(strconv.Itoa(len(body)))
	bw.WriteString("\r\n")
	writeDate(bw)
	writeConnection(bw, r, keep)
	bw.WriteString("\r\n")
	if r.Method != http.MethodHead {
		bw.WriteString(body)
	}
	if err := bw.Flush(); err != nil {
		return false
	}
	if keep && r.ContentLength != 0 {
		n, err := io.CopyN(io.Discard, r.Body, maxDiscard+1)
		if n > maxDiscard || (err != nil && err != io.EOF) {
			return false
		}
	}
	return keep
}

func writeStatusLine(bw *bufio.Writer, r *http.Request, status int) {
	if r.ProtoAtLeast(1, 1) {
		bw.WriteString("HTTP/1.1 ")
	} else {
		bw.WriteString("HTTP/1.0 ")
	}
	text := http.StatusText(status)
	if text == "" {
		text = "status code " + strconv.Itoa(status)
	}
	bw.WriteString(strconv.Itoa(status))
	bw.WriteByte(' ')
	bw.WriteString(text)
	bw.WriteString("\r\n")
}

func writeDate(bw *bufio.Writer) {
	var b [len(http.TimeFormat)]byte
	bw.WriteString("Date: ")
	bw.Write(time.Now().UTC().AppendFormat(b[:0], http.TimeFormat))
	bw.WriteString("\r\n")
}

// writeConnection writes the Connection header an HTTP/1.x client needs
// to know whether the connection stays.
func writeConnection(bw *bufio.Writer, r *http.Request, keep bool) {
	switch {
	case !keep:
		bw.WriteString("Connection: close\r\n")
	case !r.ProtoAtLeast(1, 1):
		bw.WriteString("Connection: keep-alive\r\n")
	}
}

// forwardTarget returns the request-target to send upstream, exactly the
// path judged: "" when it cannot be sent unchanged (a path starting with
// "//" holding a byte the URL encoder escapes, as the transport would
// have: kept so, since the rules judged it once).
func forwardTarget(path string) string {
	opaque, _, _ := strings.Cut(path, "?")
	if !strings.HasPrefix(opaque, "//") {
		return path
	}
	p, err := url.PathUnescape(opaque)
	if err != nil {
		return ""
	}
	u := url.URL{Path: p, RawPath: opaque}
	if u.EscapedPath() != opaque {
		return ""
	}
	return path
}

// excluded are the header fields the proxy writes upstream itself, or not
// at all.
var excluded = map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

// Envoy's answer when the server cannot be reached.
const upstreamErrorBody = "upstream connect error or disconnect/reset before headers\n"

// forward sends an allowed request upstream and its answer back. It
// returns the answer's status, whether the client connection stays, and
// whether the server could not be reached.
func (cc *clientConn) forward(r *http.Request, target string, id uint32) (status int, keep, upErr bool) {
	if expectsContinue(r) && r.ContentLength != 0 && r.ProtoAtLeast(1, 1) {
		// Go's server said 100 Continue when the transport read the
		// body, at once: the same here.
		_ = cc.c.SetWriteDeadline(deadline(cc.lim.WriteTimeout))
		cc.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if cc.bw.Flush() != nil {
			return 0, false, false
		}
	}
	replayable := r.ContentLength == 0
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		up, err := cc.upstream(id)
		if err == nil {
			resp, err = up.roundTrip(r, target)
			if err == nil {
				break
			}
		}
		cc.dropUpstream()
		// A pooled connection the server closed while idle: once more on
		// a new one, when nothing of the request is lost.
		if attempt == 0 && replayable && up != nil && up.reused && errors.Is(err, errNothingRead) {
			continue
		}
		keep := cc.answer(r, http.StatusServiceUnavailable, errorHeader, upstreamErrorBody) && replayable
		return http.StatusServiceUnavailable, keep, true
	}
	keep = !r.Close
	ok := cc.writeResponse(r, resp, &keep)
	if !ok || resp.Close || !resp.ProtoAtLeast(1, 1) {
		cc.dropUpstream()
	}
	return resp.StatusCode, keep && ok, false
}

var errNothingRead = errors.New("upstream closed before answering")

// upstream returns the client connection's upstream connection for
// identity id: its own, else one from the pool, else a new one.
func (cc *clientConn) upstream(id uint32) (*upConn, error) {
	k := poolKey{id: id, dst: cc.ci.dst}
	if cc.up != nil && cc.up.key != k {
		cc.p.pool.put(cc.up)
		cc.up = nil
	}
	if cc.up == nil {
		up, err := cc.p.pool.get(k)
		if err != nil {
			return nil, err
		}
		cc.up = up
	}
	return cc.up, nil
}

func (cc *clientConn) dropUpstream() {
	if cc.up != nil {
		_ = closeSocket(cc.up.c, cc.up.rw)
		cc.up = nil
	}
}

// roundTrip writes r upstream (target: its request-target) and reads the
// answer's head, past informational answers (their heads are not
// relayed: the client got its 100 Continue from the proxy).
func (u *upConn) roundTrip(r *http.Request, target string) (*http.Response, error) {
	bw := u.bw
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(target)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(r.Host)
	bw.WriteString("\r\n")
	if ua := r.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		bw.WriteString("User-Agent: ")
		bw.WriteString(ua[0])
		bw.WriteString("\r\n")
	}
	chunked := len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked"
	switch {
	case chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case r.ContentLength > 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(r.ContentLength, 10))
		bw.WriteString("\r\n")
	case r.Method != "GET" && r.Method != "HEAD":
		// Go's transport: "many servers expect a Content-Length".
		bw.WriteString("Content-Length: 0\r\n")
	}
	if err := r.Header.WriteSubset(bw, excluded); err != nil {
		return nil, err
	}
	bw.WriteString("\r\n")
	var err error
	switch {
	case chunked:
		cw := httputil.NewChunkedWriter(bw)
		if _, err = io.Copy(cw, r.Body); err == nil {
			cw.Close()
			bw.WriteString("\r\n") // no trailers: they come unjudged
		}
	case r.ContentLength > 0:
		_, err = io.Copy(bw, r.Body)
	}
	if err != nil {
		// The client's body ended short: the server gets what came (the
		// request forwarded), and the connection ends.
		_ = bw.Flush()
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		if u.reused && r.ContentLength == 0 {
			return nil, fmt.Errorf("%w: %v", errNothingRead, err)
		}
		return nil, err
	}
	u.reused = true
	for {
		if _, err := u.br.Peek(1); err != nil {
			return nil, fmt.Errorf("%w: %v", errNothingRead, err)
		}
		resp, err := http.ReadResponse(u.br, r)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, errors.New("the server switched protocols: no upgrade was asked")
		}
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			return resp, nil
		}
	}
}

// writeResponse writes the server's answer to the client; false when it
// could not be written or read whole (both connections end then). keep
// says, in and out, whether the client connection stays.
func (cc *clientConn) writeResponse(r *http.Request, resp *http.Response, keep *bool) bool {
	defer resp.Body.Close()
	h := resp.Header
	l7.RemoveHopByHop(h)
	bodyAllowed := r.Method != http.MethodHead && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified
	chunked := false
	if bodyAllowed && resp.ContentLength >= 0 {
		h["Content-Length"] = []string{strconv.FormatInt(resp.ContentLength, 10)}
	} else if bodyAllowed {
		delete(h, "Content-Length")
		if r.ProtoAtLeast(1, 1) {
			chunked = true
		} else {
			*keep = false // the end of the body is the end of the connection
		}
	}
	_ = cc.c.SetWriteDeadline(deadline(cc.lim.WriteTimeout))
	bw := cc.bw
	writeStatusLine(bw, r, resp.StatusCode)
	if err := h.Write(bw); err != nil {
		return false
	}
	if _, ok := h["Date"]; !ok {
		writeDate(bw)
	}
	if chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	writeConnection(bw, r, *keep)
	bw.WriteString("\r\n")
	if !bodyAllowed {
		return bw.Flush() == nil
	}
	var w io.Writer = bw
	var cw io.WriteCloser
	if chunked {
		cw = httputil.NewChunkedWriter(bw)
		w = cw
	}
	if err := cc.copyBody(w, resp.Body, cc.up); err != nil {
		return false
	}
	if cw != nil {
		cw.Close()
		bw.WriteString("\r\n")
	}
	return bw.Flush() == nil
}

// copyBody copies an answer's body to the client, flushing whenever the
// server has nothing more to read at once (a streamed answer is not held
// back).
func (cc *clientConn) copyBody(w io.Writer, body io.Reader, up *upConn) error {
	buf := bufPool.Get().([]byte)
	defer bufPool.Put(buf)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if up.br.Buffered() == 0 {
				if ferr := cc.bw.Flush(); ferr != nil {
					return ferr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
