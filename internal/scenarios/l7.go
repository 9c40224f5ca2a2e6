package scenarios

import (
	"regexp/syntax"
	"strings"

	"github.com/cnlab/cnlab/l7"
)

// L7Scenario is a set of policies with L7 HTTP rules on port L7Port and
// some requests whose outcome was checked by hand against Cilium's
// documented semantics (docs/policy.md, "L7 HTTP rules").
type L7Scenario struct {
	Name     string
	Policies string
	Expect   []HTTPCell
}

// L7Port is the port the L7 scenarios put rules on.
const L7Port = 80

// HTTPCell is one request from one endpoint to another on L7Port and the
// status expected: 0 no connection, 403 denied by the proxy, 200 passed.
type HTTPCell struct {
	From, To string
	Method   string
	Path     string
	Header   []string // "Name: value"; "Host: h" sets the Host
	Status   int
}

func req(from, to, method, path string, status int, header ...string) HTTPCell {
	return HTTPCell{From: from, To: to, Method: method, Path: path, Header: header, Status: status}
}

// getPublic is the thesis's example: app=web in x accepts GET /public
// from its own namespace.
const getPublic = "  endpointSelector:\n    matchLabels: {app: web}\n  ingress:\n  - fromEndpoints:\n    - {}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n      rules:\n        http:\n        - {method: GET, path: /public}\n"

// L7 is the L7 scenario table.
var L7 = []L7Scenario{
	{Name: "GET /public from the same namespace", Policies: cnp("x", "get-public", getPublic),
		Expect: []HTTPCell{
			req("x/c", "x/a", "GET", "/public", 200), req("x/b", "x/a", "GET", "/public", 200),
			req("x/c", "x/a", "GET", "/private", 403), req("x/b", "x/a", "POST", "/public", 403),
			req("x/c", "x/a", "HEAD", "/public", 403), req("x/c", "x/a", "get", "/public", 403),
			req("x/c", "x/a", "GET", "/public/x", 403), req("x/c", "x/a", "GET", "/public?q=1", 403),
			req("x/c", "x/a", "GET", "/publicx", 403),
			req("y/b", "x/a", "GET", "/public", 0), req("z/c", "x/a", "GET", "/public", 0),
			req("x/a", "x/c", "GET", "/private", 200), // x/c is not selected
		}},
	{Name: "regexes, headers, host, and rules that add up", Policies: cnp("y", "api", "  endpointSelector:\n    matchLabels: {app: web}\n  ingress:\n"+
		"  - fromEndpoints:\n    - matchLabels: {k8s:io.kubernetes.pod.namespace: x}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n      rules:\n        http:\n"+
		"        - {method: \"GET|HEAD\", path: \"/api/v[0-9]+/items\"}\n"+
		"        - {method: POST, path: /submit, headers: [\"X-Token: s3cret\"]}\n"+
		"        - {path: \"/open/.*\", headers: [X-Any]}\n"+
		"        - {method: PUT, path: /h, headerMatches: [{name: X-Mode, value: fast}, {name: X-Present}]}\n"+
		"        - {method: GET, path: /vhost, host: \"svc\\\\.example(:80)?\"}\n"+
		"  - fromEndpoints:\n    - matchLabels: {k8s:io.kubernetes.pod.namespace: z, app: web}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n      rules:\n        http:\n        - {method: DELETE, path: /z-only}\n"),
		Expect: []HTTPCell{
			req("x/a", "y/a", "GET", "/api/v1/items", 200), req("x/c", "y/a", "HEAD", "/api/v22/items", 200),
			req("x/a", "y/a", "GET", "/api/v/items", 403), req("x/a", "y/a", "GET", "/api/v1/items/", 403),
			req("x/a", "y/a", "POST", "/submit", 200, "X-Token: s3cret"), req("x/a", "y/a", "POST", "/submit", 403),
			req("x/a", "y/a", "POST", "/submit", 403, "X-Token: other"),
			req("x/a", "y/a", "PATCH", "/open/anything", 200, "X-Any: 1"), req("x/a", "y/a", "GET", "/open/", 200, "X-Any: "),
			req("x/a", "y/a", "GET", "/open/a", 403),
			req("x/a", "y/a", "PUT", "/h", 200, "X-Mode: fast", "X-Present: 1"), req("x/a", "y/a", "PUT", "/h", 403, "X-Mode: fast"),
			req("x/a", "y/a", "PUT", "/h", 403, "X-Mode: slow", "X-Present: 1"),
			req("x/a", "y/a", "GET", "/vhost", 200, "Host: svc.example"), req("x/a", "y/a", "GET", "/vhost", 200, "Host: svc.example:80"),
			req("x/a", "y/a", "GET", "/vhost", 403, "Host: svcXexample"), req("x/a", "y/a", "GET", "/vhost", 403),
			// z/a gets its own rule only; x's rules are not its.
			req("z/a", "y/a", "DELETE", "/z-only", 200), req("z/a", "y/a", "GET", "/api/v1/items", 403),
			req("x/a", "y/a", "DELETE", "/z-only", 403),
			req("z/c", "y/a", "DELETE", "/z-only", 0), req("y/b", "y/a", "GET", "/api/v1/items", 0),
		}},
	{Name: "an L3/L4 allow of the same peer makes it allow-all, still proxied", Policies: cnp("x", "get-public", getPublic) +
		cnp("x", "l4-from-y", "  endpointSelector:\n    matchLabels: {app: web}\n  ingress:\n  - fromEndpoints:\n    - matchLabels: {k8s:io.kubernetes.pod.namespace: y}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n"),
		Expect: []HTTPCell{
			req("y/b", "x/a", "DELETE", "/anything", 200), req("y/a", "x/a", "GET", "/private", 200),
			req("x/c", "x/a", "GET", "/private", 403), req("x/c", "x/a", "GET", "/public", 200),
			req("z/a", "x/a", "GET", "/public", 0),
		}},
	{Name: "http: [{}] allows every request through the proxy", Policies: cnp("z", "all-http", "  endpointSelector: {}\n  ingress:\n  - fromEndpoints:\n    - {}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n      rules:\n        http:\n        - {}\n"),
		Expect: []HTTPCell{
			req("z/a", "z/b", "BREW", "/coffee", 200), req("z/c", "z/a", "get", "/x?y=1", 200),
			req("x/a", "z/a", "GET", "/", 0),
		}},
	{Name: "an L3/L4 deny drops before the proxy", Policies: cnp("x", "get-public", getPublic) +
		cnp("x", "deny-c", "  endpointSelector:\n    matchLabels: {app: web}\n  ingressDeny:\n  - fromEndpoints:\n    - matchLabels: {pod: c}\n"),
		Expect: []HTTPCell{
			req("x/c", "x/a", "GET", "/public", 0), req("x/b", "x/a", "GET", "/public", 200), req("x/b", "x/a", "GET", "/nope", 403),
		}},
	{Name: "the source's egress still applies", Policies: cnp("x", "get-public", getPublic) +
		cnp("x", "c-out-nowhere", "  endpointSelector:\n    matchLabels: {pod: c}\n  egress:\n  - toEndpoints:\n    - matchLabels: {pod: b}\n"),
		Expect: []HTTPCell{
			req("x/c", "x/a", "GET", "/public", 0), req("x/b", "x/a", "GET", "/public", 200),
		}},
	{Name: "an L7 rule whose peers select nobody makes no L7 port", Policies: cnp("x", "nobody", "  endpointSelector:\n    matchLabels: {app: web}\n  enableDefaultDeny: {ingress: false}\n  ingress:\n  - fromEndpoints:\n    - matchLabels: {app: nobody}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n      rules:\n        http:\n        - {method: GET, path: /x}\n"),
		Expect: []HTTPCell{
			req("x/c", "x/a", "GET", "/y", 200), req("y/b", "x/a", "POST", "/x", 200),
		}},
	{Name: "L7 rules on a named port", Policies: cnp("y", "named", "  endpointSelector:\n    matchLabels: {app: web}\n  ingress:\n  - fromEndpoints:\n    - {}\n    toPorts:\n    - ports:\n      - {port: serve-80-tcp, protocol: TCP}\n      rules:\n        http:\n        - {method: GET, path: /named}\n"),
		Expect: []HTTPCell{
			req("y/b", "y/a", "GET", "/named", 200), req("y/c", "y/a", "GET", "/other", 403), req("x/a", "y/a", "GET", "/named", 0),
		}},
	// The rules judge the header the proxy forwards (l7.ForwardHeader):
	// hop-by-hop headers and those Connection names never reach the
	// server, so no rule can be met by them.
	{Name: "headers the proxy does not forward", Policies: cnp("x", "hop", "  endpointSelector:\n    matchLabels: {app: web}\n  ingress:\n  - fromEndpoints:\n    - {}\n    toPorts:\n    - ports:\n      - {port: \"80\", protocol: TCP}\n      rules:\n        http:\n"+
		"        - {method: GET, path: /te, headers: [\"Te: trailers\"]}\n"+
		"        - {method: GET, path: /secret, headers: [\"X-Secret: 1\"]}\n"),
		Expect: []HTTPCell{
			req("x/c", "x/a", "GET", "/te", 403, "Te: trailers"),
			req("x/c", "x/a", "GET", "/secret", 200, "X-Secret: 1"),
			req("x/c", "x/a", "GET", "/secret", 403, "X-Secret: 1", "Connection: X-Secret"),
		}},
}

// Request is an HTTP request a test sends.
type Request struct {
	Method, Path string
	Header       []string // "Name: value"; "Host: h" sets the Host
}

// Requests returns, for every rule, a request that matches it and its near
// misses: another method, the method in lower case, the path with a
// suffix, the path with a query, each required header missing or with
// another value, another host. Which of them a policy allows is for the
// model to say: a near miss of one rule may match another.
func Requests(rules []l7.Rule) []Request {
	var out []Request
	seen := map[string]bool{}
	add := func(r Request) {
		k := r.Method + " " + r.Path + " " + strings.Join(r.Header, "|")
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	for _, r := range rules {
		base := Request{Method: sample(r.Method, "GET"), Path: sample(r.Path, "/")}
		if r.Host != "" {
			base.Header = append(base.Header, "Host: "+sample(r.Host, "h"))
		}
		for _, h := range r.Headers {
			v := h.Value
			if v == "" {
				v = "present"
			}
			base.Header = append(base.Header, h.Name+": "+v)
		}
		add(base)
		with := func(f func(*Request)) {
			x := base
			x.Header = append([]string(nil), base.Header...)
			f(&x)
			add(x)
		}
		with(func(x *Request) { x.Method = "HEAD" })
		with(func(x *Request) { x.Method = "PATCH" })
		with(func(x *Request) { x.Method = strings.ToLower(x.Method) })
		with(func(x *Request) { x.Path += "x" })
		with(func(x *Request) { x.Path = strings.TrimSuffix(x.Path, "/") + "/more" })
		with(func(x *Request) { x.Path += "?q=1" })
		for i, h := range base.Header {
			name, _, _ := strings.Cut(h, ":")
			with(func(x *Request) { x.Header = append(x.Header[:i:i], x.Header[i+1:]...) })
			with(func(x *Request) { x.Header[i] = name + ": wrong" })
		}
		if r.Host == "" {
			with(func(x *Request) { x.Header = append(x.Header, "Host: other.example") })
		}
	}
	return out
}

// sample returns a string the RE2 expression re matches in full (def
// when re is empty): the first alternative, one repetition of a +, none
// of a * or ?, the first character of a class.
func sample(re, def string) string {
	if re == "" {
		return def
	}
	t, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return def
	}
	var b strings.Builder
	var walk func(t *syntax.Regexp)
	walk = func(t *syntax.Regexp) {
		switch t.Op {
		case syntax.OpLiteral:
			b.WriteString(string(t.Rune))
		case syntax.OpCharClass:
			if len(t.Rune) > 0 {
				r := t.Rune[0]
				if r < ' ' && len(t.Rune) > 1 && t.Rune[1] >= 'a' {
					r = 'a'
				}
				b.WriteRune(r)
			}
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			b.WriteByte('x')
		case syntax.OpCapture:
			walk(t.Sub[0])
		case syntax.OpConcat:
			for _, s := range t.Sub {
				walk(s)
			}
		case syntax.OpAlternate:
			walk(t.Sub[0])
		case syntax.OpPlus:
			walk(t.Sub[0])
		case syntax.OpRepeat:
			for i := 0; i < t.Min; i++ {
				walk(t.Sub[0])
			}
		}
	}
	walk(t)
	return b.String()
}
