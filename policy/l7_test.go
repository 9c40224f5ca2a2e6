package policy

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/internal/scenarios"
	"github.com/cnlab/cnlab/l7"
)

// request turns a scenario request into the model's, with the Host a
// client sends by default (the destination's address and port).
func request(method, path string, header []string, host string) Request {
	r := Request{Method: method, Path: path, Host: host, Header: map[string][]string{}}
	for _, h := range header {
		name, value, _ := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if strings.EqualFold(name, "host") {
			r.Host = value
			continue
		}
		r.Header[name] = append(r.Header[name], value)
	}
	return r
}

// TestL7ScenarioExpectations checks the model against the hand-checked
// cells of the L7 scenario table.
func TestL7ScenarioExpectations(t *testing.T) {
	lab := scenarioLab(t)
	for _, sc := range scenarios.L7 {
		m := modelFor(t, lab, sc.Policies)
		for _, c := range sc.Expect {
			src, _ := lab.Endpoint(c.From)
			dst, _ := lab.Endpoint(c.To)
			host := netip.AddrPortFrom(dst.IP, scenarios.L7Port).String()
			v := m.HTTPVerdict(src, dst, scenarios.L7Port, request(c.Method, c.Path, c.Header, host))
			if v.Status != c.Status {
				t.Errorf("%s: %s -> %s %s %s %v: model says %d (%s), want %d", sc.Name, c.From, c.To, c.Method, c.Path, c.Header, v.Status, v.L7, c.Status)
			}
		}
	}
}

// TestL7CompiledAgreesWithModel checks that the IR the datapaths and the
// proxy consume (L7 ports, HTTPRulesFor) gives the model's status for
// every pair and every generated request of every L7 scenario.
func TestL7CompiledAgreesWithModel(t *testing.T) {
	lab := scenarioLab(t)
	for _, sc := range scenarios.L7 {
		m := modelFor(t, lab, sc.Policies)
		c, err := m.Compile()
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		var rules []l7.Rule // from the policies: the IR has none of a rule that selects nobody
		for _, p := range m.Policies {
			for _, sp := range p.Specs {
				for _, r := range sp.Ingress.Allow {
					for _, pr := range r.Ports {
						rules = append(rules, pr.HTTP...)
					}
				}
			}
		}
		reqs := scenarios.Requests(rules)
		if len(reqs) < 8 {
			t.Fatalf("%s: only %d requests generated", sc.Name, len(reqs))
		}
		bad := 0
		for i := range lab.Endpoints {
			for j := range lab.Endpoints {
				if i == j {
					continue
				}
				src, dst := &lab.Endpoints[i], &lab.Endpoints[j]
				host := netip.AddrPortFrom(dst.IP, scenarios.L7Port).String()
				for _, r := range reqs {
					mr := request(r.Method, r.Path, r.Header, host)
					want := m.HTTPVerdict(src, dst, scenarios.L7Port, mr).Status
					got := 0
					if c.Allows(src.IP, dst.IP, ProtoTCP, scenarios.L7Port) {
						got = 200
						id := c.IdentityOfIP(dst.IP)
						for _, p := range c.L7Ports(id) {
							if p != scenarios.L7Port {
								continue
							}
							mt, err := l7.Compile(c.HTTPRulesFor(id, p, src.IP))
							if err != nil {
								t.Fatal(err)
							}
							hdr := http.Header{} // as the proxy judges it: forwarded
							for k, vs := range mr.Header {
								hdr[k] = slices.Clone(vs)
							}
							l7.ForwardHeader(hdr, mr.Host, src.IP)
							if !mt.Allows(l7.Request{Method: mr.Method, Path: mr.Path, Host: mr.Host, Header: hdr}) {
								got = 403
							}
						}
					}
					if got != want && bad < 5 {
						bad++
						t.Errorf("%s: %s -> %s %s %s %v: IR gives %d, model %d", sc.Name, src.ID(), dst.ID(), r.Method, r.Path, r.Header, got, want)
					}
				}
			}
		}
	}
}

// TestRequestsNearMisses pins what the generator sends for one rule.
func TestRequestsNearMisses(t *testing.T) {
	got := scenarios.Requests([]l7.Rule{{Method: "GET", Path: "/api/v[0-9]+", Headers: []l7.HeaderMatch{{Name: "X-T", Value: "v"}}}})
	var lines []string
	for _, r := range got {
		lines = append(lines, r.Method+" "+r.Path+" "+strings.Join(r.Header, "|"))
	}
	want := []string{"GET /api/v0 X-T: v", "HEAD /api/v0 X-T: v", "PATCH /api/v0 X-T: v", "get /api/v0 X-T: v",
		"GET /api/v0x X-T: v", "GET /api/v0/more X-T: v", "GET /api/v0?q=1 X-T: v", "GET /api/v0 ", "GET /api/v0 X-T: wrong",
		"GET /api/v0 X-T: v|Host: other.example"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
