package l7

import (
	"fmt"
	"math/rand"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// naiveAllows is the reference: every rule in turn, each regexp compiled
// as ^(?:re)$, header names compared without case.
func naiveAllows(rules []Rule, r Request) bool {
	full := func(re, s string) bool {
		return re == "" || regexp.MustCompile(`^(?:`+re+`)$`).MatchString(s)
	}
rules:
	for _, rule := range rules {
		if !full(rule.Method, r.Method) || !full(rule.Path, r.Path) || !full(rule.Host, r.Host) {
			continue
		}
		for _, h := range rule.Headers {
			found := false
			for k, vs := range r.Header {
				if strings.EqualFold(k, h.Name) {
					for _, v := range vs {
						found = found || h.Value == "" || v == h.Value
					}
				}
			}
			if !found {
				continue rules
			}
		}
		return true
	}
	return false
}

var (
	rulePaths = []string{"", "/a", "/b", "/a/b", `/a\.b`, "/a?x=1", `/a\?x=1`, "/a/.*", "/a.*", "/[ab]", "/a|/b",
		"(?i)/a", "^/a$", ".*b", "/a(/b)?", "/(a|b)/.*", `\A/a\z`, "(?m)^/a$", "/é", "\uFFFD", ".", "/a/b/c|/a",
		"[^a]*", "/[a-z]", "/a/b/.*", "/a/[0-9]+", "(?:)", "/a/(?:b|c)/.*", "/x=1", "/a/b?", "/a(^b)?", "(/a)?^/b", "/a$", "/a/^b.*", `/a\z.*`, "/a$b?", "/a$|/b", "/a/^b?",
		"(/v1)?/a/.*", "(/v1)?/b", ".*/a", ".*a/.*", ".*", "(/v1)?", "(?i)(/v1)?/a", "(/v1)?a*b"}
	reqPaths = []string{"", "/", "/a", "/b", "/a/b", "/a/", "/a?x=1", "/a.b", "/axb", "/A", "/ab", "/a/b/c", "\xff",
		"/é", "/x=1", "/ax=1", "/a/12", "/a/c/d", "/q", "/a\n", "b", "/v1", "/v1/a/x", "/v1/b", "/v1a", "/xa/y"}
	ruleMethods = []string{"", "GET", "POST", "get", "GET|HEAD", "G.T", "(?i)get", "[GP]OST", "GE(T)?", ".*", "GET|HEAD|PUT|POST"}
	reqMethods  = []string{"GET", "POST", "HEAD", "get", "GOT", "PUT", "GE", "Get", ""}
	ruleHosts   = []string{"", "example.com", "example.com:8080", `.*\.example\.com`, "a.example.com|b.example.com",
		`example\.com(:\d+)?`, "(?i)EXAMPLE.com", "[a-h]"}
	reqHosts = []string{"example.com", "example.com:8080", "a.example.com", "b.example.com", "EXAMPLE.COM", "", "examplexcom", "c"}
	hdrNames = []string{"X-A", "x-a", "X-B", "content-type"}
	hdrVals  = []string{"", "1", "2", "a b"}
)

func pick(rnd *rand.Rand, s []string) string { return s[rnd.Intn(len(s))] }

func randomRule(rnd *rand.Rand) Rule {
	var r Rule
	if rnd.Intn(3) > 0 {
		r.Path = pick(rnd, rulePaths)
	}
	if rnd.Intn(2) > 0 {
		r.Method = pick(rnd, ruleMethods)
	}
	if rnd.Intn(3) == 0 {
		r.Host = pick(rnd, ruleHosts)
	}
	for range rnd.Intn(4) / 2 {
		r.Headers = append(r.Headers, HeaderMatch{Name: pick(rnd, hdrNames), Value: pick(rnd, hdrVals)})
	}
	return r
}

func randomRequest(rnd *rand.Rand) Request {
	r := Request{Method: pick(rnd, reqMethods), Path: pick(rnd, reqPaths), Host: pick(rnd, reqHosts)}
	if rnd.Intn(5) > 0 {
		r.Header = http.Header{}
		for range rnd.Intn(4) {
			n := pick(rnd, hdrNames)
			r.Header[n] = append(r.Header[n], pick(rnd, hdrVals))
		}
	}
	return r
}

// TestRandom compares Allows with the naive reference on random rule sets
// and requests.
func TestRandom(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	sets := 3000
	if testing.Short() {
		sets = 300
	}
	for i := range sets {
		n := 1 + rnd.Intn(8)
		if i%10 == 0 {
			n = 1 + rnd.Intn(200)
		}
		rules := make([]Rule, n)
		for j := range rules {
			rules[j] = randomRule(rnd)
		}
		m, err := Compile(rules)
		if err != nil {
			t.Fatalf("Compile(%+v): %v", rules, err)
		}
		for range 60 {
			r := randomRequest(rnd)
			if got, want := m.Allows(r), naiveAllows(rules, r); got != want {
				t.Fatalf("rules %s\nrequest %+v\nAllows = %v, naive reference %v", show(rules), r, got, want)
			}
		}
	}
}

func show(rules []Rule) string {
	var b strings.Builder
	for _, r := range rules {
		fmt.Fprintf(&b, "\n  %+v", r)
	}
	return b.String()
}
