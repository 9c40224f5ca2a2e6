package experiment

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
	"github.com/cnlab/cnlab/traffic"
)

// TestL7BadInput: the L7 matrix keys and the http and ab workloads'
// options are refused with the file, the YAML path and what is wrong.
func TestL7BadInput(t *testing.T) {
	hw := "workloads: [{kind: http}]\n"
	cases := []struct{ src, want string }{
		{hw + "matrix: {l7Mode: [l8]}\n", `x.yaml: matrix.l7Mode[0]: "l8": one of none, l4, http-any, rules`},
		{hw + "matrix: {l7Mode: [rules], l7Rules: [10], l7Match: [middle]}\n", `x.yaml: matrix.l7Match[0]: "middle": one of first, last, absent`},
		{hw + "matrix: {l7Mode: [rules], l7Rules: [-1]}\n", "x.yaml: matrix.l7Rules[0]: -1: between 0 and 100000"},
		{hw + "matrix: {l7Mode: [rules], l7Rules: [100001]}\n", "x.yaml: matrix.l7Rules[0]: 100001: between 0 and 100000"},
		{hw + "matrix: {l7Rules: [10]}\n", "x.yaml: matrix.l7Rules: 10: applies with l7Mode rules"},
		{hw + "matrix: {l7Match: [last]}\n", "x.yaml: matrix.l7Match: last: applies with l7Mode rules"},
		{hw + "matrix: {l7Mode: [rules], l7Rules: [0, 10]}\n", "x.yaml: matrix.l7Rules: l7Mode rules needs 1 or more rules"},
		{hw + "matrix: {l7Mode: [rules]}\n", "x.yaml: matrix.l7Rules: l7Mode rules needs 1 or more rules"},
		{hw + "matrix: {topology: [direct], l7Mode: [l4]}\n", "x.yaml: matrix.l7Mode: a chain (and topology direct, no CNI) has no policy datapath"},
		{hw + "matrix: {topology: [chain], l7Mode: [rules], l7Rules: [1]}\n", "x.yaml: matrix.l7Mode: a chain (and topology direct, no CNI) has no policy datapath"},
		{hw + "matrix: {datapath: [nftables], l7Mode: [l4], policies: [10]}\n", "x.yaml: matrix.policies: 10: an L7 point's policy is the one l7Mode generates"},
		{"workloads: [{kind: tcp-rr}]\nmatrix: {l7Mode: [l4]}\n", "x.yaml: matrix.l7Mode: l4: the L7 policy allows TCP port 80 alone, not the tcp-rr workload's"},
		{hw + "matrix: {datapath: [nftables], policies: [10]}\n", "x.yaml: matrix.policies: 10: the generated policies allow the iperf3 and rr ports, not port 80 of the http workload"},
		{hw + "matrix: {services: [1]}\n", "x.yaml: matrix.services: 1: the measured Service maps the iperf3 and rr ports, not port 80"},
		{"workloads: [{kind: tcp-rr, mode: new}]\n", "x.yaml: workloads[0].mode: applies to http and ab workloads only"},
		{"workloads: [{kind: ping, expect: [200]}]\n", "x.yaml: workloads[0].expect: applies to http and ab workloads only"},
		{"workloads: [{kind: http, mode: pipelined}]\n", `x.yaml: workloads[0].mode: "pipelined": one of keepalive, new`},
		{"workloads: [{kind: http, concurrency: 5000}]\n", "x.yaml: workloads[0].concurrency: 5000: between 1 and 1000"},
		{"workloads: [{kind: http, concurrency: -1}]\n", "x.yaml: workloads[0].concurrency: -1: between 1 and 1000"},
		{"workloads: [{kind: http, method: get}]\n", `x.yaml: workloads[0].method: "get": an HTTP method in upper case`},
		{"workloads: [{kind: ab, method: POST}]\n", `x.yaml: workloads[0].method: "POST": ab sends GET, or HEAD (ab -i)`},
		{"workloads: [{kind: http, path: match}]\n", `x.yaml: workloads[0].path: "match": a request-target starting with /`},
		{"workloads: [{kind: http, path: /a b}]\n", `x.yaml: workloads[0].path: "/a b": a request-target starting with /`},
		{"workloads: [{kind: http, expect: [200, 42]}]\n", "x.yaml: workloads[0].expect[1]: 42: a status from 100 to 599"},
		{"workloads: [{kind: http, expect: [403, 403]}]\n", "x.yaml: workloads[0].expect[1]: 403 is listed twice"},
		{"workloads: [{kind: ab}]\nduration: 1500ms\n", "x.yaml: duration: 1.5s: ab (the ab workload) runs for whole seconds"},
		{"workloads: [{kind: ab}]\nwarmup: 500ms\n", "x.yaml: warmup: 500ms: ab (the ab workload) warms up for whole seconds"},
		{hw + "sweeps: [{name: a, figures: {x: rules}}]\n", `x.yaml: sweeps[0].figures.x: "rules": one of policies, chainLength, switches, firewallRules, services, l7Rules`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src), "x.yaml", false)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s...", c.src, err, c.want)
			continue
		}
		if !input.Is(err) {
			t.Errorf("%q: %v is not an input error", c.src, err)
		}
	}
	// Baselines without L7 rules run on eBPF too.
	mustPoints(t, hw+"matrix: {datapath: [ebpf], l7Mode: [none, l4]}\n", false)
}

// TestL7Points: an L7 sweep expands into one point per policy: the
// baselines once whatever l7Rules and l7Match say, the rules points with
// their match first by default; every http point asks for /match and
// expects 200, but 403 where no rule matches or the workload says so.
func TestL7Points(t *testing.T) {
	src := `
workloads:
  - {kind: http}
  - {kind: ab, method: HEAD, concurrency: 10, mode: new, expect: [403]}
matrix:
  datapath: [iptables, nftables]
  l7Mode: [none, l4, http-any, rules]
  l7Rules: [1, 100]
  l7Match: [first, last, absent]
`
	pts := mustPoints(t, src, false)
	// Per datapath: 3 baselines + 2 + 3 rules points (one rule is first
	// and last), two workloads each.
	if len(pts) != 2*(3+2+3)*2 {
		t.Fatalf("%d points, want 32", len(pts))
	}
	series := map[string]bool{}
	for _, p := range pts {
		w, q := p.Workload, p.Params
		series[p.Series] = true
		if w.Path != l7MatchPath {
			t.Errorf("%s %s: path %q, want %s", p.Series, w.Name(), w.Path, l7MatchPath)
		}
		if q.L7Mode != results.L7Rules && (q.L7Rules != 0 || q.L7Match != "") {
			t.Errorf("%s: a baseline keeps l7Rules %d and l7Match %q", p.Series, q.L7Rules, q.L7Match)
		}
		want := []int{200}
		switch {
		case w.Kind == results.AB:
			want = []int{403}
		case q.L7Match == results.MatchAbsent:
			want = []int{403}
		}
		if !slices.Equal(w.Expect, want) {
			t.Errorf("%s %s: expect %v, want %v", p.Series, w.Name(), w.Expect, want)
		}
		if w.Kind == results.HTTP && (w.Mode != traffic.HTTPKeepAlive || w.Concurrency != 1 || w.Method != "GET") {
			t.Errorf("http defaults: %+v", w)
		}
	}
	for _, s := range []string{"iptables no policy", "nftables L4 allow", "iptables http: [{}]", "nftables L7 rules, match absent"} {
		if !series[s] {
			t.Errorf("no series %q in %v", s, series)
		}
	}
	if got := pts[1].Workload.Name(); got != "ab new c10 HEAD" {
		t.Errorf("ab workload name %q", got)
	}
	// Outside L7 sweeps the request is for /.
	if p := mustPoints(t, "workloads: [{kind: http}]\n", false); p[0].Workload.Path != "/" || p[0].Workload.Expect[0] != 200 {
		t.Errorf("plain http point: %+v", p[0].Workload)
	}
	// The L7 keys are applied policies: one lab for all of a datapath's
	// points.
	labs := map[string]bool{}
	for _, p := range pts {
		labs[labKey(p.Params)] = true
	}
	if len(labs) != 2 {
		t.Errorf("%d labs, want one per datapath", len(labs))
	}
}

// TestL7PolicyText: the generated policy parses, holds the rules the
// point asks for with the matching one where it says, and the status
// l7Status expects is the policy model's for every request tried.
func TestL7PolicyText(t *testing.T) {
	spec, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t", Datapath: "nftables"})
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := spec.Endpoint("default/client")
	sv, _ := spec.Endpoint("default/server")
	if policyText(results.Params{Datapath: "nftables", L7Mode: results.L7None}) != "" {
		t.Error("l7Mode none: a policy")
	}
	type req struct{ method, path string }
	reqs := []req{{"GET", "/match"}, {"HEAD", "/match"}, {"POST", "/match"}, {"GET", "/"}, {"GET", "/path1"}, {"POST", "/path2"},
		{"GET", "/path2"}, {"GET", "/match/x"}, {"GET", "/match?q=1"}}
	var ps []results.Params
	for _, mode := range []string{results.L7L4, results.L7HTTPAny} {
		ps = append(ps, results.Params{Datapath: "nftables", L7Mode: mode})
	}
	for _, n := range []int{1, 2, 5} {
		for _, at := range results.L7Matches {
			ps = append(ps, results.Params{Datapath: "nftables", L7Mode: results.L7Rules, L7Rules: n, L7Match: at})
		}
	}
	for _, p := range ps {
		text := policyText(p)
		if got := strings.Count(text, "kind: CiliumNetworkPolicy"); got != 1 {
			t.Fatalf("%s: %d policies, want 1:\n%s", l7Label(p), got, text)
		}
		if p.L7Mode == results.L7Rules {
			if got := strings.Count(text, "- {method:"); got != p.L7Rules {
				t.Errorf("%s %d: %d rules:\n%s", l7Label(p), p.L7Rules, got, text)
			}
			lines := strings.Split(strings.TrimSpace(text), "\n")
			first, last := strings.Contains(text, "http:\n        - {method: GET, path: /match}"), strings.HasSuffix(lines[len(lines)-1], "path: /match}")
			one := p.L7Rules == 1 && p.L7Match != results.MatchAbsent
			if first != (p.L7Match == results.MatchFirst || one) || last != (p.L7Match == results.MatchLast || one) {
				t.Errorf("%s %d: /match first %v, last %v:\n%s", l7Label(p), p.L7Rules, first, last, text)
			}
		}
		m, _ := compileGenerated(t, spec, text)
		for _, r := range reqs {
			v := m.HTTPVerdict(cl, sv, HTTPPort, policy.Request{Method: r.method, Path: r.path})
			if want := l7Status(p, r.method, r.path); v.Status != want {
				t.Errorf("%s %d: %s %s: model %d (%s), l7Status %d", l7Label(p), p.L7Rules, r.method, r.path, v.Status, v.L7, want)
			}
			if wantProxied := p.L7Mode != results.L7L4; v.Proxied != wantProxied {
				t.Errorf("%s: proxied %v", l7Label(p), v.Proxied)
			}
		}
	}
	// The seed's generator at 10,000 rules: parses, half of them POST.
	big := policyText(results.Params{Datapath: "nftables", L7Mode: results.L7Rules, L7Rules: 10000, L7Match: results.MatchLast})
	if _, err := policy.Parse([]byte(big), "big"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(big, "method: POST"); n != 4999 {
		t.Errorf("%d POST rules of 10,000", n)
	}
}

// TestHTTPArgv: how the workloads' commands are built.
func TestHTTPArgv(t *testing.T) {
	e := sampleEnv{ep: endpoints{dest: netip.MustParseAddr("10.0.0.2")}}
	cnlab := cnlabArgv([]string{"/x/cnlab", "rr"})
	w := results.Workload{Kind: results.HTTP, Mode: "new", Concurrency: 10, Method: "GET", Path: "/match", Expect: []int{200, 403}}
	got := strings.Join(httpClientArgv(cnlab, httpURL(e, w), w, 1500*time.Millisecond), " ")
	if want := "/x/cnlab http client -o json --url http://10.0.0.2:80/match --method GET --mode new --concurrency 10 --duration 1.5s --expect 200,403"; got != want {
		t.Errorf("http client:\n got %s\nwant %s", got, want)
	}
	e6 := sampleEnv{ep: endpoints{dest: netip.MustParseAddr("fd00:0:192::3")}}
	if got := httpURL(e6, w); got != "http://[fd00:0:192::3]:80/match" {
		t.Errorf("http URL over IPv6: %s", got)
	}
	if got := strings.Join(httpServerArgv(cnlab), " "); got != "/x/cnlab http server --listen :80 --name server" {
		t.Errorf("http server: %s", got)
	}
	for _, c := range []struct {
		w    results.Workload
		d    time.Duration
		want string
	}{
		{results.Workload{Kind: results.AB, Mode: "keepalive", Concurrency: 10, Method: "GET", Path: "/"}, 10 * time.Second, "ab -q -r -c 10 -t 10 -n 500000 -k http://10.0.0.2:80/"},
		{results.Workload{Kind: results.AB, Mode: "new", Concurrency: 1, Method: "GET", Path: "/match"}, time.Second, "ab -q -r -c 1 -t 1 -n 50000 http://10.0.0.2:80/match"},
		{results.Workload{Kind: results.AB, Mode: "new", Concurrency: 1, Method: "HEAD", Path: "/match"}, 2 * time.Second, "ab -q -r -c 1 -t 2 -n 100000 -i http://10.0.0.2:80/match"},
	} {
		if got := strings.Join(abArgv(httpURL(e, c.w), c.w, c.d), " "); got != c.want {
			t.Errorf("ab %s:\n got %s\nwant %s", c.w.Name(), got, c.want)
		}
	}
}

// TestHTTPResultJudged: an unexpected status or an error fails the
// sample with the statuses seen; ab's non-2xx responses are expected only
// when a non-2xx status is.
func TestHTTPResultJudged(t *testing.T) {
	w := results.Workload{Kind: results.HTTP, Expect: []int{200}}
	r := &traffic.HTTPResult{Requests: 10, Unexpected: 3, Errors: 1, Statuses: map[int]uint64{200: 7, 403: 2, 0: 1}, FirstError: "connection reset"}
	err := checkHTTPResult(r, w, "")
	if err == nil || err.Error() != "http: 3 of 10 requests unexpected: statuses seen 200: 7, 403: 2, error: 1; expected 200; first error: connection reset" {
		t.Errorf("err %v", err)
	}
	if err := checkHTTPResult(&traffic.HTTPResult{Seconds: 1}, w, ""); err == nil || !strings.Contains(err.Error(), "no request completed") {
		t.Errorf("no request: %v", err)
	}
	if err := checkHTTPResult(&traffic.HTTPResult{Requests: 5, Statuses: map[int]uint64{200: 5}}, w, ""); err != nil {
		t.Error(err)
	}
	m := httpMetrics(&traffic.HTTPResult{PerSecond: 100, Requests: 5, Statuses: map[int]uint64{403: 5}})
	if m["requests_per_s"] != 100 || m["status_403"] != 5 || m["unexpected"] != 0 {
		t.Errorf("metrics %v", m)
	}
	// ab's percentiles are whole milliseconds: one that reads 0 is left
	// out, not recorded as 0 µs; the mean (with decimals) stays (issue 37).
	m = httpMetrics(&traffic.HTTPResult{Mode: "ab", ResolutionUs: traffic.ABResolutionUs, Requests: 5,
		LatencyUs: traffic.Latency{Mean: 83, P50: 0, P90: 1000, P99: 2000}})
	if _, ok := m["latency_p50_us"]; ok || m["latency_p90_us"] != 1000 || m["latency_p99_us"] != 2000 || m["latency_mean_us"] != 83 {
		t.Errorf("ab metrics %v", m)
	}
	for _, c := range []struct {
		file   string
		expect []int
		want   uint64 // unexpected
	}{
		{"ab-keepalive-200.txt", []int{200}, 0},
		{"ab-keepalive-200.txt", []int{403}, 0}, // set below from the 2xx count
		{"ab-keepalive-403.txt", []int{200}, 0},
		{"ab-keepalive-403.txt", []int{403}, 0},
		{"ab-reset.txt", []int{200}, 0},
	} {
		out, err := os.ReadFile("../traffic/testdata/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		r, err := traffic.ParseAB(out)
		if err != nil {
			t.Fatal(err)
		}
		ab := abSplit(r)
		if ab.ok+ab.non2xx+ab.errors != r.Requests {
			t.Errorf("%s: %s does not add up to %d", c.file, ab, r.Requests)
		}
		want := ab.errors
		if !slices.ContainsFunc(c.expect, func(s int) bool { return s < 300 }) {
			want += ab.ok
		} else {
			want += ab.non2xx
		}
		if got := ab.unexpected(c.expect); got != want {
			t.Errorf("%s expect %v: %d unexpected (%s), want %d", c.file, c.expect, got, ab, want)
		}
		r.Unexpected = ab.unexpected(c.expect)
		err = checkHTTPResult(r, results.Workload{Kind: results.AB, Expect: c.expect}, ab.String())
		if (err != nil) != (r.Unexpected > 0) || err != nil && !strings.Contains(err.Error(), fmt.Sprintf("statuses seen %s; expected", ab)) {
			t.Errorf("%s expect %v: %v", c.file, c.expect, err)
		}
	}
	// ab-keepalive-403.txt is all 403: expected with [403], each one
	// unexpected with [200].
	out, _ := os.ReadFile("../traffic/testdata/ab-keepalive-403.txt")
	r403, _ := traffic.ParseAB(out)
	if ab403 := abSplit(r403); ab403.non2xx == 0 || ab403.unexpected([]int{403}) != 0 || ab403.unexpected([]int{200}) != ab403.non2xx {
		t.Errorf("ab 403s: %s", ab403)
	}
}

// l7Exp is the smallest L7 run: 10 rules on nftables, the request's rule
// first or absent (403, expected by itself), cnlab's client and ab, over
// IPv4 and IPv6 (a dual-stack lab).
const l7Exp = `
name: l7
warmup: 0s
duration: 1s
repetitions: 1
seed: 3
workloads:
  - {kind: http}
  - {kind: ab, concurrency: 2}
matrix:
  datapath: [nftables]
  l7Mode: [rules]
  l7Rules: [10]
  l7Match: [first, absent]
  ipFamily: [4, 6]
`

// TestRunL7 runs l7Exp end to end: every point measures requests per
// second with no unexpected status, the denied ones all 403, and the lab
// and its L7 proxy are gone afterwards.
func TestRunL7(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft", "nftables")
	testutil.RequireTool(t, "ab", "apache2-utils")
	for _, p := range runL7(t, l7Exp, "t-exp-l7", 8) {
		m := p.Samples[0].Metrics
		if m["requests_per_s"] <= 0 || m["unexpected"] != 0 || m["errors"] != 0 || m["latency_p50_us"] > m["latency_p99_us"] {
			t.Errorf("%s (%s %s): %v", p.ID, p.Series, p.Workload.Name(), m)
		}
		denied := p.Params.L7Match == results.MatchAbsent
		switch {
		case p.Workload.Kind == results.HTTP && denied && m["status_403"] != m["requests"]:
			t.Errorf("%s: %v requests, %v 403s", p.ID, m["requests"], m["status_403"])
		case p.Workload.Kind == results.HTTP && !denied && m["status_200"] != m["requests"]:
			t.Errorf("%s: %v requests, %v 200s", p.ID, m["requests"], m["status_200"])
		case p.Workload.Kind == results.AB && denied != (m["status_non2xx"] == m["requests"]):
			t.Errorf("%s: %v requests, %v non-2xx", p.ID, m["requests"], m["status_non2xx"])
		}
		if m["proxy_cpu_pct"] <= 0 {
			t.Errorf("%s: proxy CPU %v: the requests went through no proxy", p.ID, m["proxy_cpu_pct"])
		}
	}
	if labs, _ := lab.Labs(); slices.Contains(labs, "t-exp-l7") {
		t.Error("the lab is still up after the run")
	}
}

// runL7 runs an L7 experiment file on a lab of the given name, which must
// complete with n points, and returns those measured (the others failed
// the test).
func runL7(t *testing.T, exp, name string, n int) []results.PointResult {
	t.Helper()
	r, err := runShort(t, context.Background(), exp, Options{LabName: name})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Points) != n || r.Status != results.StatusComplete {
		t.Fatalf("%s with %d points", r.Status, len(r.Points))
	}
	var done []results.PointResult
	for _, p := range r.Points {
		if p.Status != results.PointDone || len(p.Samples) != 1 {
			t.Errorf("%s (%s %s): %s: %s", p.ID, p.Series, p.Workload.Name(), p.Status, p.Error)
			continue
		}
		done = append(done, p)
	}
	return done
}

// TestL7ProxyPoints: l7Proxy haproxy doubles the proxied points only (no
// policy and the L4 allow have no proxy: measured once), names their line
// "HAProxy (reference)", gives them a lab of their own, and keeps the
// cnlab points as a run without the axis has them.
func TestL7ProxyPoints(t *testing.T) {
	base := "workloads: [{kind: http}]\nmatrix:\n  datapath: [ebpf]\n  l7Mode: [none, l4, http-any, rules]\n  l7Rules: [1]\n"
	without := mustPoints(t, base, false)
	with := mustPoints(t, base+"  l7Proxy: [cnlab, haproxy]\n", false)
	if len(with) != len(without)+2 {
		t.Fatalf("%d points with l7Proxy, %d without: want 2 more (http-any and rules)", len(with), len(without))
	}
	labs := map[string]bool{}
	var cnlab []results.Point
	for _, p := range with {
		labs[labKey(p.Params)] = true
		if p.Params.L7Proxy == "" {
			cnlab = append(cnlab, p)
			continue
		}
		if p.Params.L7Proxy != results.L7ProxyHAProxy || !strings.HasSuffix(p.Series, ", HAProxy (reference)") ||
			!strings.Contains(p.Params.Text(), "l7proxy=haproxy") || (p.Params.L7Mode != results.L7HTTPAny && p.Params.L7Mode != results.L7Rules) {
			t.Errorf("haproxy point %s: %+v", p.Series, p.Params)
		}
	}
	if len(labs) != 2 {
		t.Errorf("%d labs, want 2 (cnlab's proxy, HAProxy)", len(labs))
	}
	for i, p := range cnlab {
		q := without[i]
		if p.Series != q.Series || labKey(p.Params) != labKey(q.Params) || fmt.Sprintf("%+v", p.Params) != fmt.Sprintf("%+v", q.Params) {
			t.Errorf("cnlab point %s differs from the run without l7Proxy: %+v, %+v", p.Series, p.Params, q.Params)
		}
	}
	for _, c := range []struct{ src, want string }{
		{"workloads: [{kind: http}]\nmatrix: {l7Proxy: [haproxy]}\n", "x.yaml: matrix.l7Proxy: haproxy: applies with an l7Mode that goes through the proxy"},
		{"workloads: [{kind: http}]\nmatrix: {l7Mode: [rules], l7Rules: [1], l7Proxy: [envoy]}\n", `x.yaml: matrix.l7Proxy[0]: "envoy": cnlab or haproxy`},
		{"workloads: [{kind: http}]\nmatrix: {topology: [chain], l7Proxy: [haproxy]}\n", "x.yaml: matrix.l7Mode: a chain (and topology direct, no CNI) has no policy datapath"},
		{"workloads: [{kind: http}]\nmatrix: {datapath: [nftables], l7Mode: [http-any], l7Proxy: [haproxy], ipFamily: [6]}\n", "x.yaml: matrix.l7Proxy: haproxy over IPv6 on datapath nftables: HAProxy 2.6 reads no IPv6 original destination"},
	} {
		if _, err := Parse([]byte(c.src), "x.yaml", false); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s...", c.src, err, c.want)
		}
	}
}

// l7HAProxyExp puts HAProxy in the proxy's place on eBPF, with 10 rules,
// over IPv4 and IPv6.
const l7HAProxyExp = `
name: l7-haproxy
warmup: 0s
duration: 1s
repetitions: 1
seed: 3
workloads:
  - {kind: http}
matrix:
  datapath: [ebpf]
  l7Mode: [rules]
  l7Rules: [10]
  l7Match: [first, absent]
  l7Proxy: [haproxy]
  ipFamily: [4, 6]
`

// TestRunL7HAProxy runs l7HAProxyExp end to end: HAProxy answers every
// request as the point expects (200, or 403 where no rule matches), its
// CPU is the point's proxy CPU, and nothing of it is left after the run.
func TestRunL7HAProxy(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "haproxy", "haproxy")
	for _, p := range runL7(t, l7HAProxyExp, "t-exp-hap", 4) {
		m := p.Samples[0].Metrics
		want := "status_200"
		if p.Params.L7Match == results.MatchAbsent {
			want = "status_403"
		}
		if m["requests"] <= 0 || m["unexpected"] != 0 || m["errors"] != 0 || m[want] != m["requests"] {
			t.Errorf("%s (%s): %v", p.ID, p.Series, m)
		}
		if m["proxy_cpu_pct"] <= 0 || m["proxy_cpu_us_per_req"] <= 0 {
			t.Errorf("%s: proxy CPU %v%%, %v µs a request: HAProxy's CPU not measured", p.ID, m["proxy_cpu_pct"], m["proxy_cpu_us_per_req"])
		}
	}
	if labs, _ := lab.Labs(); slices.Contains(labs, "t-exp-hap") {
		t.Error("the lab is still up after the run")
	}
	if _, err := os.Stat("/run/cnlab/t-exp-hap"); !os.IsNotExist(err) {
		t.Errorf("the lab's run directory is left: %v", err)
	}
}
