package l7

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// hopByHop are the headers of one connection that a proxy does not
// forward (RFC 9110 7.6.1, and those httputil.ReverseProxy removes).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// ForwardHeader makes a request's header h the one cnlab's L7 proxy
// forwards (host: the request's Host, src: the client's address),
// before the rules judge it, so that the header judged is the header the
// server receives: without the hop-by-hop headers and those the
// Connection header names (and so without any protocol upgrade: the rest
// of an upgraded connection would be piped unjudged), and with the
// proxy's X-Forwarded-For, -Host and -Proto in place of the client's
// forwarding headers; User-Agent as the transport sends it.
func ForwardHeader(h http.Header, host string, src netip.Addr) {
	RemoveHopByHop(h)
	// Go's transport sends each value with CR and LF made spaces, and
	// trimmed (a value folded over lines, obs-fold, may end in one).
	for _, vs := range h {
		for i, v := range vs {
			if v != "" && (isSpace(v[0]) || isSpace(v[len(v)-1]) || strings.ContainsAny(v, "\r\n")) {
				vs[i] = textproto.TrimString(newlineToSpace.Replace(v))
			}
		}
	}
	// Go's transport sends the first User-Agent alone, and none when it
	// is empty.
	if ua := h["User-Agent"]; len(ua) > 1 {
		h["User-Agent"] = ua[:1]
	}
	if ua := h["User-Agent"]; len(ua) == 1 && ua[0] == "" {
		delete(h, "User-Agent")
	}
	delete(h, "Forwarded")
	h["X-Forwarded-For"] = []string{src.String()}
	h["X-Forwarded-Host"] = []string{host}
	h["X-Forwarded-Proto"] = []string{"http"}
}

// RemoveHopByHop removes from h the headers of one connection: the
// hop-by-hop headers and those the Connection header names (a proxy's
// request and answer headers both).
func RemoveHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textprotoTrim(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		delete(h, name)
	}
}

// textprotoTrim trims the spaces and tabs around one element of a header
// list, or a header value.
func textprotoTrim(s string) string { return strings.Trim(s, " \t") }

func isSpace(b byte) bool { return b == ' ' || b == '\t' }

var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")
