package experiment

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/topology"
)

const good = `
name: t
warmup: 1s
duration: 2s
repetitions: 3
workloads:
  - {kind: tcp-stream}
  - {kind: tcp-rr, requestSize: 100, responseSize: 200}
matrix:
  topology: [single-host, multi-host]
  datapath: [iptables, ebpf]
  policies: [0, 10, 200]
quick:
  duration: 1s
  repetitions: 2
  matrix: {policies: [0, 200]}
`

func TestParseAndExpand(t *testing.T) {
	s, err := Parse([]byte(good), "t.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 2*2*3*2 {
		t.Fatalf("%d points, want 24", len(pts))
	}
	if pts[1].Workload.RequestSize != 100 || pts[0].Workload.Streams != 1 {
		t.Errorf("workload defaults: %+v %+v", pts[0].Workload, pts[1].Workload)
	}
	q, err := Parse([]byte(good), "t.yaml", true)
	if err != nil {
		t.Fatal(err)
	}
	qp, _ := q.Points()
	if len(qp) != 16 || q.Repetitions != 2 || time.Duration(q.Duration) != time.Second || time.Duration(q.Warmup) != time.Second || !q.IsQuick() {
		t.Errorf("quick: %d points, %d reps, %v/%v", len(qp), q.Repetitions, q.Duration, q.Warmup)
	}
}

func TestSweepsAndSeries(t *testing.T) {
	src := `
workloads: [{kind: tcp-stream}]
matrix: {policies: [0, 100]}
sweeps:
  - {name: flat, matrix: {datapath: [ebpf, nftables]}}
  - {name: ipt, matrix: {datapath: [iptables], policyMode: [no-match, top-of-chain]}}
  - name: complexity
    matrix: {datapath: [ebpf], policyMode: [l4-rules], policies: [0, 40]}
    profile: true
    workloads: [{kind: ping, count: 3}]
`
	s, err := Parse([]byte(src), "dir/s.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "s" {
		t.Errorf("name from the file: %q", s.Name)
	}
	pts, _ := s.Points()
	series := map[string]int{}
	for _, p := range pts {
		series[p.Sweep+"/"+p.Series]++
		if p.Sweep == "complexity" && (!p.Profile || p.Workload.Kind != results.Ping) {
			t.Errorf("sweep overrides: %+v", p)
		}
	}
	want := map[string]int{"flat/ebpf": 2, "flat/nftables": 2, "ipt/iptables no-match": 2, "ipt/iptables top-of-chain": 2, "complexity/ebpf l4-rules": 2}
	if len(series) != len(want) {
		t.Fatalf("series %v", series)
	}
	for k, n := range want {
		if series[k] != n {
			t.Errorf("series %s: %d points, want %d (%v)", k, series[k], n, series)
		}
	}
}

// TestBadInput: every error names the file, the YAML path and the problem.
func TestBadInput(t *testing.T) {
	base := "workloads: [{kind: tcp-stream}]\n"
	cases := []struct{ src, want string }{
		{"", "x.yaml: empty experiment document"},
		{"- a\n", "x.yaml: an experiment must be a mapping"},
		{"workloads: [{kind: &k tcp-stream}, {kind: *k}]\n", "x.yaml: workloads[1].kind: aliases (*k) are not supported"},
		{base + "durration: 1s\n", "x.yaml: durration: unknown field"},
		{base + "duration: fast\n", "x.yaml: duration:"},
		{base + "duration: 1500ms\n", "x.yaml: duration: 1.5s: iperf3 (the tcp-stream workload) measures whole seconds"},
		{base + "repetitions: 0\n", "x.yaml: repetitions: 0: between 1 and 1000"},
		{base + "duration: 0s\n", "x.yaml: duration: 0s: between 100ms and 24h"},
		{base + "name: ../up\n", `x.yaml: name: "../up": letters, digits`},
		{base + "repetitions: -1\n", "x.yaml: repetitions: -1: between 1 and 1000"},
		{"workloads: [{kind: tcp-bulk}]\n", `x.yaml: workloads[0].kind: "tcp-bulk" is not a workload`},
		{"workloads: [{kind: tcp-rr, streams: 2}]\n", "x.yaml: workloads[0].streams: applies to tcp-stream and udp-stream workloads only"},
		{"workloads: [{kind: udp-stream, rate: fast}]\n", `x.yaml: workloads[0].rate: "fast" is not a rate`},
		{"workloads: [{kind: tcp-rr, requestSize: 70000}]\n", "x.yaml: workloads[0].requestSize: 70000 bytes: between 1 and 65000"},
		{"workloads: []\n", "x.yaml: workloads: give at least one workload"},
		{base + "matrix: {datapath: [cilium]}\n", `x.yaml: matrix.datapath[0]: "cilium" is not a datapath`},
		{base + "matrix: {policies: [0, -5]}\n", "x.yaml: matrix.policies[1]: -5: between 0 and 100000"},
		{base + "matrix: {policyMode: [top-of-chain], datapath: [ebpf]}\n", "x.yaml: matrix.policyMode: top-of-chain is an iptables filler mode (datapath ebpf)"},
		{base + "matrix: {policies: [30000], datapath: [nftables]}\n", "x.yaml: matrix.policies: 30000: policies generated on ports 20000 and up take at most 22767"},
		{base + "matrix: {topology: [chain], datapath: [ebpf]}\n", "x.yaml: matrix.datapath: ebpf: a chain has no policy datapath"},
		{base + "matrix: {chainLength: [3]}\n", "x.yaml: matrix.chainLength: applies to the chain topology only"},
		{base + "matrix: {chainLength: [0]}\n", "x.yaml: matrix.chainLength: applies to the chain topology only"},
		{base + "matrix: {topology: [chain], chainLength: [-1]}\n", "x.yaml: matrix.chainLength[0]: -1: between 0 and 64"},
		{base + "matrix: {topology: [direct], chainLength: [1]}\n", "x.yaml: matrix.chainLength: 1: the direct pair has no hops"},
		{base + "matrix: {topology: [chain], chainLength: [0, 1], shaperRate: [1gbit]}\n", "x.yaml: matrix.shaperRate: a direct pair (chainLength 0) has no hop to shape in"},
		{base + "matrix: {topology: [chain], shaperRate: [1gbit], shaperDirection: [up]}\n", `x.yaml: matrix.shaperDirection[0]: "up": one of server, client, both, all`},
		{base + "matrix: {topology: [chain], shaperDirection: [all]}\n", "x.yaml: matrix.shaperDirection: all: applies with a shaperRate"},
		{base + "matrix: {shaperDirection: [all]}\n", "x.yaml: matrix.shaperDirection: network functions go in chain hops"},
		{base + "matrix: {link: [vxlan]}\n", "x.yaml: matrix.link: applies to the multi-host and chain presets"},
		{base + "matrix: {topology: [multi-host], link: [cable]}\n", `x.yaml: matrix.link: "cable": hosts are joined by wire or vxlan`},
		{base + "matrix: {offloads: [tso]}\n", `x.yaml: matrix.offloads[0]: "tso": on, off, or a list`},
		{base + "matrix: {hostRouting: [legacy]}\n", "x.yaml: matrix.hostRouting: applies to the eBPF datapath only (datapath iptables)"},
		{base + "matrix: {datapath: [nftables], peers: [ipsets]}\n", "x.yaml: matrix.peers: applies to the iptables datapath only (datapath nftables)"},
		{base + "matrix: {peers: [sets]}\n", `x.yaml: matrix.peers[0]: "sets": addresses or ipsets`},
		{base + "matrix: {topology: [chain], peers: [ipsets]}\n", "x.yaml: matrix.peers: applies to the iptables datapath, not to chains"},
		{base + "matrix: {topology: [nowhere.yaml]}\n", "x.yaml: topology: nowhere.yaml: no such topology file"},
		{base + "matrix: {firewallRules: [10]}\n", "x.yaml: matrix.firewallRules: network functions go in chain hops"},
		{base + "matrix: {shaperRate: [1gbit]}\n", "x.yaml: matrix.shaperRate: network functions go in chain hops"},
		{base + "matrix: {topology: [chain], shaperRate: [fast]}\n", `x.yaml: matrix.shaperRate[0]: "fast" is not a rate`},
		{base + "matrix: {topology: [chain], policyMode: [l4-rules]}\n", "x.yaml: matrix.policyMode: l4-rules: a chain has no policy datapath"},
		{"workloads: [{kind: udp-stream}]\nmatrix: {size: [70000]}\n", "x.yaml: matrix.size: 70000 bytes: a UDP datagram holds at most 65507"},
		{base + "matrix: {topology: [../examples/three-hosts.yaml]}\n", "x.yaml: matrix.topology: ../examples/three-hosts.yaml: the workloads run between endpoints default/client (app=client) and default/server (app=server)"},
		{base + "matrix: {topology: [multi-host], link: [vxlan], mtu: [65500]}\n", "x.yaml: matrix.mtu[0]: 65500: between 576 and 65000"},
		{base + "sweeps: [{matrix: {policies: [1]}}]\n", "x.yaml: sweeps[0].name: every sweep needs a name"},
		{base + "sweeps: [{name: a}, {name: a}]\n", `x.yaml: sweeps[1].name: "a" is used twice`},
		{base + "quick: {skip: true}\n", "x.yaml: quick.skip: applies to a sweep's quick block"},
		{base + "sweeps: [{name: a, figures: {x: colour}}]\n", `x.yaml: sweeps[0].figures.x: "colour": one of policies, chainLength`},
		{base + "sweeps: [{name: a, figures: {reference: {speed: fast}}}]\n", `x.yaml: sweeps[0].figures.reference.speed: "speed": one of throughput_gbps`},
		{base + "sweeps: [{name: a, figures: {reference: {rtt_us: \" \"}}}]\n", "x.yaml: sweeps[0].figures.reference.rtt_us: the seed's numbers in words"},
		{base + "sweeps: [{name: a, figures: {metrics: [speed]}}]\n", `x.yaml: sweeps[0].figures.metrics[0]: "speed": one of throughput_gbps`},
		{base + "sweeps: [{name: a, matrix: {datapath: [bpf]}}]\n", `x.yaml: sweeps[0].matrix.datapath[0]: "bpf" is not a datapath`},
		{base + "pin: {client: 4096}\n", "x.yaml: pin.client: CPU 4096 does not exist here"},
		{base + "matrix: {policies: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], flows: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], size: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], mtu: [1000, 1500, 4000, 9000, 9001], zerocopy: [true, false]}\n", "x.yaml: matrix: expands to more than 10000 points"},
		{"workloads: [{kind: ping, count: 1}]\n", "x.yaml: workloads[0].count: 1: at least 2"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src), "x.yaml", false)
		if c.want == "" {
			// repetitions: 0 means the default; quick's 0 is ignored as well
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s...", c.src, err, c.want)
			continue
		}
		if !input.Is(err) && !input.Is(err) {
			t.Errorf("%q: %v is not an input error", c.src, err)
		}
	}
}

// mustPoints parses an experiment file and expands its points.
func mustPoints(t *testing.T, src string, quick bool) []results.Point {
	t.Helper()
	s, err := Parse([]byte(src), "x.yaml", quick)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	pts, err := s.Points()
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return pts
}

// TestQuickSkip: a sweep with quick.skip is left out of quick runs only;
// skipping every sweep is an error, not a run of the top matrix.
func TestQuickSkip(t *testing.T) {
	src := "workloads: [{kind: tcp-stream}]\nsweeps:\n  - {name: a, matrix: {policies: [1]}}\n  - {name: b, matrix: {policies: [2]}, quick: {skip: true}}\n"
	for _, quick := range []bool{false, true} {
		pts := mustPoints(t, src, quick)
		var sweeps []string
		for _, p := range pts {
			sweeps = append(sweeps, p.Sweep)
		}
		want := "[a b]"
		if quick {
			want = "[a]"
		}
		if fmt.Sprint(sweeps) != want {
			t.Errorf("quick %v: sweeps %v, want %s", quick, sweeps, want)
		}
	}
	all := "workloads: [{kind: tcp-stream}]\nsweeps:\n  - {name: a, quick: {skip: true}}\n"
	if _, err := Parse([]byte(all), "x.yaml", true); err == nil || !strings.Contains(err.Error(), "every sweep has quick: {skip: true}") {
		t.Errorf("every sweep skipped: %v", err)
	}
}

// TestChainLengths: a chain swept from 0 (the direct pair, seed 001's
// n = 2) keeps 0 apart from the default length, which is filled in.
func TestChainLengths(t *testing.T) {
	for _, tc := range []struct {
		matrix string
		want   []int
	}{
		{"{topology: [chain], chainLength: [0, 1, 3]}", []int{0, 1, 3}},
		{"{topology: [chain]}", []int{DefaultChainLength}},
		{"{topology: [direct]}", []int{0}},
		{"{topology: [single-host]}", []int{0}},
	} {
		pts := mustPoints(t, "workloads: [{kind: tcp-stream}]\nmatrix: "+tc.matrix+"\n", false)
		var got []int
		for _, p := range pts {
			got = append(got, p.Params.ChainLength)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: lengths %v, want %v", tc.matrix, got, tc.want)
		}
		if strings.Contains(tc.matrix, "chain") && !strings.Contains(pts[0].Params.Text(), fmt.Sprintf("length=%d", tc.want[0])) {
			t.Errorf("%s: text %q names no length", tc.matrix, pts[0].Params.Text())
		}
	}
}

// TestFlowsApplyToStreamsOnly: flows, size and zerocopy multiply the
// stream workloads only; request/response is measured once per point.
func TestFlowsApplyToStreamsOnly(t *testing.T) {
	s, err := Parse([]byte("warmup: 0s\nduration: 1s\nworkloads: [{kind: tcp-stream}, {kind: tcp-rr}, {kind: udp-stream}]\nmatrix: {flows: [1, 4], zerocopy: [false, true]}\n"), "x.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	pts, _ := s.Points()
	kinds := map[string]int{}
	for _, p := range pts {
		kinds[p.Workload.Kind]++
		if p.Workload.Kind == results.TCPRR && (p.Params.Flows != 0 || p.Params.Zerocopy) {
			t.Errorf("rr point with stream parameters: %+v", p.Params)
		}
		if p.Workload.Kind == results.UDPStream && p.Params.Zerocopy {
			t.Errorf("udp point with zerocopy: %+v", p.Params)
		}
	}
	if kinds[results.TCPStream] != 4 || kinds[results.TCPRR] != 1 || kinds[results.UDPStream] != 2 {
		t.Errorf("points per workload %v, want tcp-stream 4, tcp-rr 1, udp-stream 2", kinds)
	}
}

// compileGenerated parses generated policies and compiles them on spec.
func compileGenerated(t *testing.T, spec *topology.Spec, text string) (*policy.Model, *policy.Compiled) {
	t.Helper()
	pols, err := policy.Parse([]byte(text), "gen")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	m, err := policy.NewModel(spec, pols)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

// TestGeneratedPolicies: every mode's policies parse, and compile on the
// preset into what the mode says: the workload ports stay allowed, and the
// number of rules grows with the number of policies.
func TestGeneratedPolicies(t *testing.T) {
	spec, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t", Datapath: "ebpf"})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{results.ModeNoMatch, results.ModeL4Rules, results.ModeSelectors} {
		for _, n := range []int{0, 1, 40} {
			p := results.Params{Datapath: "ebpf", PolicyMode: mode, Policies: n}
			text := policyText(p)
			if text == "" {
				if n != 0 || mode == results.ModeL4Rules {
					t.Errorf("%s %d: no policy", mode, n)
				}
				continue
			}
			m, c := compileGenerated(t, spec, text)
			// 4 workload ports, and one port per generated policy or rule.
			if got, want := len(c.Rules), 4+n; got != want {
				t.Errorf("%s %d: %d rules, want %d", mode, n, got, want)
			}
			cl, _ := spec.Endpoint("default/client")
			sv, _ := spec.Endpoint("default/server")
			for _, port := range []int{IperfPort, RRPort, fillerPort + 2*n} {
				allowed := m.Verdict(cl, sv, "TCP", port).Allowed
				if want := port != fillerPort+2*n; allowed != want {
					t.Errorf("%s %d: port %d allowed=%v, want %v", mode, n, port, allowed, want)
				}
			}
		}
	}
	if policyText(results.Params{Datapath: "iptables", PolicyMode: results.ModeNoMatch, Policies: 10}) != "" {
		t.Error("iptables no-match: filler rules, not policies")
	}
	// terms (seed 003): one policy, N+1 matchLabels terms of which only
	// the client's selects anybody: the client reaches every port, the
	// server is isolated from everyone else, and the compiled rules stay
	// one (the empty terms select no identity).
	for _, n := range []int{1, 40} {
		text := policyText(results.Params{Datapath: "ebpf", PolicyMode: results.ModeTerms, Policies: n})
		if got := strings.Count(text, "- matchLabels:"); got != n+1 {
			t.Errorf("terms %d: %d matchLabels terms, want %d:\n%s", n, got, n+1, text)
		}
		if got := strings.Count(text, "kind: CiliumNetworkPolicy"); got != 1 {
			t.Errorf("terms %d: %d policies, want 1", n, got)
		}
		m, c := compileGenerated(t, spec, text)
		if len(c.Rules) != 1 {
			t.Errorf("terms %d: %d compiled rules, want 1", n, len(c.Rules))
		}
		cl, _ := spec.Endpoint("default/client")
		sv, _ := spec.Endpoint("default/server")
		for _, port := range []int{IperfPort, RRPort, fillerPort} {
			if !m.Verdict(cl, sv, "TCP", port).Allowed {
				t.Errorf("terms %d: client to server port %d denied", n, port)
			}
		}
		if !m.Verdict(sv, cl, "TCP", IperfPort).Allowed {
			t.Errorf("terms %d: server to client denied, but the policy isolates only the server's ingress", n)
		}
	}
	// With peers: ipsets every term is a rule and a set, the empty ones
	// included (Calico's layout).
	for _, n := range []int{1, 40} {
		_, c := compileGenerated(t, spec, policyText(results.Params{Datapath: "iptables", Peers: "ipsets", PolicyMode: results.ModeTerms, Policies: n}))
		if len(c.Terms) != n+1 || len(c.PeerSets) != n+1 {
			t.Errorf("terms %d: %d terms and %d sets, want %d", n, len(c.Terms), len(c.PeerSets), n+1)
		}
	}
	if policyText(results.Params{Datapath: "ebpf", PolicyMode: results.ModeTerms}) != "" {
		t.Error("terms 0: the seed's baseline has no policy at all")
	}
}

func TestScheduleShufflesAndGroups(t *testing.T) {
	s, err := Parse([]byte(good), "t.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	pts, _ := s.Points()
	pts[0].Profile = true
	byID := map[string]results.Point{}
	for _, p := range pts {
		byID[p.ID] = p
	}
	a := schedule(pts, 3, rand.New(rand.NewSource(1)))
	b := schedule(pts, 3, rand.New(rand.NewSource(1)))
	c := schedule(pts, 3, rand.New(rand.NewSource(2)))
	if len(a) != 3*len(pts)+1 {
		t.Fatalf("%d jobs", len(a))
	}
	same, differ := true, false
	for i := range a {
		same = same && a[i] == b[i]
		differ = differ || a[i] != c[i]
	}
	if !same || !differ {
		t.Errorf("the order must follow the seed: same seed same=%v, other seed differs=%v", same, differ)
	}
	count := map[results.Job]int{}
	builds := 0
	prev := ""
	for _, j := range a {
		count[j]++
		if k := labKey(byID[j.Point].Params); k != prev {
			builds++
			prev = k
		}
	}
	for _, p := range pts {
		for r := 0; r < 3; r++ {
			if count[results.Job{Point: p.ID, Repetition: r}] != 1 {
				t.Errorf("%s rep %d scheduled %d times", p.ID, r, count[results.Job{Point: p.ID, Repetition: r}])
			}
		}
	}
	if a[len(a)-1] != (results.Job{Point: pts[0].ID, Repetition: -1}) {
		t.Errorf("profiled run last: %v", a[len(a)-1])
	}
	// Labs: 2 topologies x (ebpf + 3 iptables filler sizes) = 8 per round.
	if builds != 8*3+1 && builds != 8*3 { // the profiled run may reuse the last lab
		t.Errorf("%d lab builds, want 24 or 25: a lab is built once per round", builds)
	}
}

func TestParseOffloadsAndRates(t *testing.T) {
	m, err := parseOffloads("tso=off,gro=on")
	if err != nil || m["tso"] != "off" || m["gro"] != "on" || len(m) != 2 {
		t.Errorf("%v %v", m, err)
	}
	if m, _ := parseOffloads("off"); len(m) != 3 {
		t.Errorf("off: %v", m)
	}
	for in, want := range map[string]float64{"1G": 1e9, "500M": 5e8, "100K": 1e5, "2.5G": 2.5e9, "1000": 1000} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("rate %s: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"G", "-1G", "1T", "fast"} {
		if _, err := parseRate(bad); err == nil {
			t.Errorf("rate %q accepted", bad)
		}
	}
}

// TestPeersSweep checks that peers: [ipsets] gives its own series, lab and
// parameter text, and a lab whose iptables datapath matches peers in
// ipsets.
func TestPeersSweep(t *testing.T) {
	text := `name: ips
workloads: [{kind: tcp-stream}]
matrix: {topology: [multi-host], policyMode: [terms], policies: [0, 10]}
sweeps:
  - name: plain
    matrix: {datapath: [iptables]}
  - name: ipsets
    matrix: {datapath: [iptables], peers: [ipsets]}
`
	s, err := Parse([]byte(text), "x.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, p := range pts {
		keys[labKey(p.Params)] = true
		wantSeries, wantText := "iptables terms", "policies=%d mode=terms"
		if p.Sweep == "ipsets" {
			wantSeries, wantText = "iptables+ipsets terms", "policies=%d mode=terms peers=ipsets"
		}
		if p.Series != wantSeries || p.Params.Text() != fmt.Sprintf(wantText, p.Params.Policies) {
			t.Errorf("%s: series %q, text %q", p.ID, p.Series, p.Params.Text())
		}
		spec, err := s.labSpec(p.Params, "check")
		if err != nil {
			t.Fatal(err)
		}
		if spec.IPTables.IPSets() != (p.Sweep == "ipsets") {
			t.Errorf("%s: lab peers %q", p.ID, spec.IPTables.Peers)
		}
	}
	if len(pts) != 4 || len(keys) != 2 {
		t.Errorf("%d points on %d labs, want 4 on 2", len(pts), len(keys))
	}
}

// parsePoints parses an experiment file's text and expands its points,
// failing the test on an error.
func parsePoints(t *testing.T, text, file string) []results.Point {
	t.Helper()
	s, err := Parse([]byte(text), file, false)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	return pts
}

// A typo's known fields are the file's keys only (not the internal
// allSkipped), and every unknown field of a file is reported at once
// (issue 37).
func TestUnknownFieldsAllAtOnce(t *testing.T) {
	_, err := Parse([]byte("name: t\nrepetiions: 3\nworkloads: [{kind: ping, cout: 2}]\n"), "typo.yaml", false)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Contains(strings.ToLower(msg), "allskipped") || !strings.Contains(msg, `typo.yaml: repetiions: unknown field "repetiions"`) ||
		!strings.Contains(msg, "\ntypo.yaml: workloads[0].cout: unknown field") {
		t.Errorf("got %q", msg)
	}
}
