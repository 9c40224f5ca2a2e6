package l7

import (
	"net/http"
	"strings"
	"testing"
)

func req(method, path, host string, kv ...string) Request {
	r := Request{Method: method, Path: path, Host: host, Header: http.Header{}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header[kv[i]] = append(r.Header[kv[i]], kv[i+1]) // names as given, not canonical
	}
	return r
}

func TestAllows(t *testing.T) {
	hdr := func(s ...string) []HeaderMatch {
		var hs []HeaderMatch
		for _, x := range s {
			h, err := ParseHeader(x)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		return hs
	}
	tests := []struct {
		name  string
		rules []Rule
		req   Request
		want  bool
	}{
		{"literal path", []Rule{{Path: "/public"}}, req("GET", "/public", "h"), true},
		{"query string is part of the path", []Rule{{Path: "/public"}}, req("GET", "/public?x=1", "h"), false},
		{"query string matched by regexp", []Rule{{Path: `/public(\?.*)?`}}, req("GET", "/public?x=1", "h"), true},
		{"no prefix match", []Rule{{Path: "/public"}}, req("GET", "/public/x", "h"), false},
		{"no suffix match", []Rule{{Path: "/public"}}, req("GET", "/x/public", "h"), false},
		{"regexp is full match", []Rule{{Path: "/pub"}}, req("GET", "/public", "h"), false},
		{"regexp path", []Rule{{Path: "/public/.*"}}, req("GET", "/public/x", "h"), true},
		{"regexp path needs its slash", []Rule{{Path: "/public/.*"}}, req("GET", "/public", "h"), false},
		{"escaped literal", []Rule{{Path: `/a\.b`}}, req("GET", "/a.b", "h"), true},
		{"escaped literal is not a dot", []Rule{{Path: `/a\.b`}}, req("GET", "/axb", "h"), false},
		{"unescaped dot", []Rule{{Path: `/a.b`}}, req("GET", "/axb", "h"), true},
		{"quoted literal stays inside", []Rule{{Path: `\Q/a.b`}}, req("GET", "/a.b", "h"), true},
		{"quoted literal is literal", []Rule{{Path: `\Q/a.b`}}, req("GET", "/axb", "h"), false},
		{"anchors allowed", []Rule{{Path: `^/a$`}}, req("GET", "/a", "h"), true},
		{"alternation", []Rule{{Path: `/a|/b`}}, req("GET", "/b", "h"), true},
		{"alternation is anchored as a whole", []Rule{{Path: `/a|/b`}}, req("GET", "/bc", "h"), false},
		{"method", []Rule{{Method: "GET"}}, req("GET", "/", "h"), true},
		{"method is case-sensitive", []Rule{{Method: "GET"}}, req("get", "/", "h"), false},
		{"lower-case method", []Rule{{Method: "get"}}, req("get", "/", "h"), true},
		{"lower-case method misses GET", []Rule{{Method: "get"}}, req("GET", "/", "h"), false},
		{"case-insensitive method regexp", []Rule{{Method: "(?i)get"}}, req("Get", "/", "h"), true},
		{"method alternation", []Rule{{Method: "GET|HEAD"}}, req("HEAD", "/", "h"), true},
		{"method any path", []Rule{{Method: "GET"}, {Method: "POST", Path: "/x"}}, req("GET", "/anything", "h"), true},
		{"method and path both", []Rule{{Method: "POST", Path: "/x"}}, req("GET", "/x", "h"), false},
		{"host", []Rule{{Host: "example.com"}}, req("GET", "/", "example.com"), true},
		{"host with port as sent", []Rule{{Host: "example.com"}}, req("GET", "/", "example.com:8080"), false},
		{"host with port in rule", []Rule{{Host: `example\.com:8080`}}, req("GET", "/", "example.com:8080"), true},
		{"host with optional port", []Rule{{Host: `example\.com(:\d+)?`}}, req("GET", "/", "example.com:80"), true},
		{"host regexp", []Rule{{Host: `.*\.example\.com`}}, req("GET", "/", "a.example.com"), true},
		{"host is case-sensitive", []Rule{{Host: `example.com`}}, req("GET", "/", "EXAMPLE.COM"), false},
		{"header presence", []Rule{{Headers: hdr("X-A")}}, req("GET", "/", "h", "X-A", "anything"), true},
		{"header presence, empty value", []Rule{{Headers: hdr("X-A")}}, req("GET", "/", "h", "X-A", ""), true},
		{"header absent", []Rule{{Headers: hdr("X-A")}}, req("GET", "/", "h", "X-B", "1"), false},
		{"header value", []Rule{{Headers: hdr("X-A: 1")}}, req("GET", "/", "h", "X-A", "1"), true},
		{"header value differs", []Rule{{Headers: hdr("X-A: 1")}}, req("GET", "/", "h", "X-A", "12"), false},
		{"header value case-sensitive", []Rule{{Headers: hdr("X-A: abc")}}, req("GET", "/", "h", "X-A", "ABC"), false},
		{"header value with spaces inside", []Rule{{Headers: hdr("X-A:  a b ")}}, req("GET", "/", "h", "X-A", "a b"), true},
		{"header value with a colon", []Rule{{Headers: hdr("X-A: a:b")}}, req("GET", "/", "h", "X-A", "a:b"), true},
		{"header name case-insensitive (rule)", []Rule{{Headers: hdr("x-a: 1")}}, req("GET", "/", "h", "X-A", "1"), true},
		{"header name case-insensitive (request)", []Rule{{Headers: hdr("X-A: 1")}}, req("GET", "/", "h", "x-a", "1"), true},
		{"multi-valued header, second value", []Rule{{Headers: hdr("X-A: 2")}}, req("GET", "/", "h", "X-A", "1", "X-A", "2"), true},
		{"multi-valued header, none equal", []Rule{{Headers: hdr("X-A: 3")}}, req("GET", "/", "h", "X-A", "1", "X-A", "2"), false},
		{"multi-valued header is not joined", []Rule{{Headers: hdr("X-A: 1,2")}}, req("GET", "/", "h", "X-A", "1", "X-A", "2"), false},
		{"value across name spellings", []Rule{{Headers: hdr("X-A: 2")}}, req("GET", "/", "h", "X-A", "1", "x-a", "2"), true},
		{"all headers needed", []Rule{{Headers: hdr("X-A", "X-B: 1")}}, req("GET", "/", "h", "X-A", "1"), false},
		{"all headers present", []Rule{{Headers: hdr("X-A", "X-B: 1")}}, req("GET", "/", "h", "X-A", "1", "X-B", "1"), true},
		{"headerMatches value", []Rule{{Headers: []HeaderMatch{{Name: "x-token", Value: "s3"}}}}, req("GET", "/", "h", "X-Token", "s3"), true},
		{"headerMatches wrong value", []Rule{{Headers: []HeaderMatch{{Name: "x-token", Value: "s3"}}}}, req("GET", "/", "h", "X-Token", "s4"), false},
		{"headerMatches presence", []Rule{{Headers: []HeaderMatch{{Name: "X-Token"}}}}, req("GET", "/", "h", "X-Token", "s4"), true},
		{"headerMatches presence, absent", []Rule{{Headers: []HeaderMatch{{Name: "X-Token"}}}}, req("GET", "/", "h"), false},
		{"nil headers", []Rule{{Headers: []HeaderMatch{{Name: "X-Token"}}}}, Request{Method: "GET", Path: "/"}, false},
		{"all fields AND", []Rule{{Method: "GET", Path: "/a", Host: "h", Headers: hdr("X-A")}}, req("GET", "/a", "h"), false},
		{"all fields AND, all there", []Rule{{Method: "GET", Path: "/a", Host: "h", Headers: hdr("X-A")}}, req("GET", "/a", "h", "X-A", "1"), true},
		{"rules OR", []Rule{{Path: "/a"}, {Path: "/b"}}, req("GET", "/b", "h"), true},
		{"empty rule", []Rule{{}}, req("WHATEVER", "/any?thing", "x:1", "X-A", "1"), true},
		{"empty rule among others", []Rule{{Path: "/a"}, {}}, req("GET", "/b", "h"), true},
		{"no rules", nil, req("GET", "/", "h"), false},
		{"empty path regexp only matches empty", []Rule{{Path: "^$"}}, req("GET", "", "h"), true},
		{"empty path regexp, non-empty path", []Rule{{Path: "^$"}}, req("GET", "/", "h"), false},
		{"invalid UTF-8 matched as U+FFFD", []Rule{{Path: "/\uFFFD"}}, req("GET", "/\xff", "h"), true},
		{"invalid UTF-8, literal path", []Rule{{Path: "/a"}}, req("GET", "/a\xff", "h"), false},
		{"non-ASCII literal", []Rule{{Path: "/é"}}, req("GET", "/é", "h"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Compile(tt.rules)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Allows(tt.req); got != tt.want {
				t.Errorf("Allows(%+v) = %v, want %v", tt.req, got, tt.want)
			}
			// The reference wraps regexps as text, which \Q defeats.
			if !strings.Contains(tt.name, "quoted") {
				if got := naiveAllows(tt.rules, tt.req); got != tt.want {
					t.Errorf("naive reference: %v, want %v", got, tt.want)
				}
			}
			if m.Len() != len(tt.rules) {
				t.Errorf("Len() = %d, want %d", m.Len(), len(tt.rules))
			}
		})
	}
}

func TestNilMatcher(t *testing.T) {
	var m *Matcher
	if m.Allows(req("GET", "/", "h")) || m.Len() != 0 {
		t.Error("nil Matcher allows a request or has rules")
	}
	if (&Matcher{}).Allows(req("GET", "/", "h")) {
		t.Error("zero Matcher allows a request")
	}
}

func TestParseHeader(t *testing.T) {
	tests := []struct {
		in   string
		want HeaderMatch
		err  bool
	}{
		{"X-A", HeaderMatch{Name: "X-A"}, false},
		{"  X-A  ", HeaderMatch{Name: "X-A"}, false},
		{"X-A: v", HeaderMatch{Name: "X-A", Value: "v"}, false},
		{"X-A:v", HeaderMatch{Name: "X-A", Value: "v"}, false},
		{"X-A :  v w  ", HeaderMatch{Name: "X-A", Value: "v w"}, false},
		{"X-A: a:b", HeaderMatch{Name: "X-A", Value: "a:b"}, false},
		{"X-A:", HeaderMatch{Name: "X-A"}, false},
		{"", HeaderMatch{}, true},
		{": v", HeaderMatch{}, true},
		{"X A: v", HeaderMatch{}, true},
		{"X(A)", HeaderMatch{}, true},
		{"Ä", HeaderMatch{}, true},
	}
	for _, tt := range tests {
		got, err := ParseHeader(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseHeader(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		rule  Rule
		field string
	}{
		{Rule{}, ""},
		{Rule{Method: "GET|POST", Path: "/a/.*", Host: `.*\.example\.com`, Headers: []HeaderMatch{{Name: "X-A"}}}, ""},
		{Rule{Method: "GET("}, "method"},
		{Rule{Path: "/a[", Method: "GET"}, "path"},
		{Rule{Path: `a)|(b`}, "path"},
		{Rule{Path: `(?<name`}, "path"},
		{Rule{Path: `\8`}, "path"},
		{Rule{Path: `a++`}, "path"},
		{Rule{Host: "*"}, "host"},
		{Rule{Host: "a{1001}"}, "host"},
		{Rule{Headers: []HeaderMatch{{Name: "X-A"}, {Name: ""}}}, "headers"},
		{Rule{Headers: []HeaderMatch{{Name: "X A"}}}, "headers"},
	}
	for _, tt := range tests {
		field, err := tt.rule.Check()
		if field != tt.field || (err != nil) != (tt.field != "") {
			t.Errorf("%+v.Check() = %q, %v; want field %q", tt.rule, field, err, tt.field)
		}
		m, err := Compile([]Rule{{}, tt.rule})
		if (err != nil) != (tt.field != "") || err != nil && m != nil {
			t.Errorf("Compile(%+v) = %v, %v", tt.rule, m, err)
		}
		if err != nil && !strings.Contains(err.Error(), "rule 1: "+tt.field+": ") {
			t.Errorf("Compile error %q does not name the rule and field", err)
		}
	}
}

// TestGroups checks that rules the index cannot tell apart by literals
// still decide exactly: many regexps joined in one group, split by
// prefix, and literal sets too large to index.
func TestGroups(t *testing.T) {
	var rules []Rule
	for _, p := range []string{"/a/.*", "/a/b/.*", "/b/[0-9]+", ".*\\.php", "/a/(x|y)z", "/a/b/c/.*",
		"(/v1)?", "(/v1)?/a", "(/v1)?/b/.*", ".*/c", ".*/d/.*", "(/v1)?(/v2)?/e"} {
		rules = append(rules, Rule{Method: "GET", Path: p}, Rule{Method: "POST", Path: p, Host: `.*\.e`})
	}
	rules = append(rules, Rule{Method: "GET|HEAD|PUT|POST", Path: "/[a-z]", Host: "[a-h]"})
	m, err := Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"GET", "POST", "HEAD", "PUT"} {
		for _, path := range []string{"/a/", "/a/b/c/d", "/b/12", "/b/x", "/x.php", "/a/xz", "/a/zz", "/q", "/Q", "/a",
			"", "/v1", "/v1/a", "/v1/b/x", "/x/c", "/x/d/y", "/v2/e", "/v1/v2/e", "/v1/e", "/v2"} {
			for _, host := range []string{"a", "x.e", "z"} {
				r := req(method, path, host)
				if got, want := m.Allows(r), naiveAllows(rules, r); got != want {
					t.Errorf("Allows(%+v) = %v, naive %v", r, got, want)
				}
			}
		}
	}
}
