package l7

import (
	"fmt"
	"net/http"
	"testing"
)

// benchRules is the rule set of seed 003's generator: rule i is
// {method: GET, path: "/path<i>"} (kind literal), "/path<i>/.*" (kind
// regex), or "(/v1)?/path<i>/.*" (kind noprefix: no literal prefix to
// index by, so all are joined in one alternation).
func benchRules(n int, kind string) []Rule {
	rules := make([]Rule, n)
	for i := range rules {
		rules[i] = Rule{Method: "GET", Path: fmt.Sprintf("/path%d", i)}
		switch kind {
		case "regex":
			rules[i].Path += "/.*"
		case "noprefix":
			rules[i].Path = "(/v1)?" + rules[i].Path + "/.*"
		}
	}
	return rules
}

// BenchmarkMatch decides one request against n rules, the matching rule
// being the first, the last or absent.
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000, 10000} {
		for _, kind := range []string{"literal", "regex", "noprefix"} {
			m, err := Compile(benchRules(n, kind))
			if err != nil {
				b.Fatal(err)
			}
			suffix := ""
			if kind != "literal" {
				suffix = "/x"
			}
			for _, pos := range []struct {
				name, path string
				want       bool
			}{
				{"first", "/path0" + suffix, true},
				{"last", fmt.Sprintf("/path%d%s", n-1, suffix), true},
				{"absent", "/absent" + suffix, false},
			} {
				r := Request{Method: "GET", Path: pos.path, Host: "server:80",
					Header: http.Header{"User-Agent": {"bench"}, "Accept": {"*/*"}}}
				b.Run(fmt.Sprintf("rules=%d/%s/%s", n, kind, pos.name), func(b *testing.B) {
					for b.Loop() {
						if m.Allows(r) != pos.want {
							b.Fatal("wrong verdict")
						}
					}
				})
			}
		}
	}
}
