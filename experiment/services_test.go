package experiment

import (
	"context"
	"fmt"
	mrand "math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// TestGeneratedServices: N Services resolve against the lab as meant.
// The measured one (first or last in the proxies' order) balances to the
// server alone, with every workload port mapped to itself; every other
// one has ServiceBackends backends outside the lab.
func TestGeneratedServices(t *testing.T) {
	spec, err := topology.Preset("single-host", topology.PresetOptions{}, topology.Overrides{Name: "t", Datapath: "iptables"})
	if err != nil {
		t.Fatal(err)
	}
	sv, _ := spec.Endpoint("default/server")
	if serviceText(results.Params{}) != "" {
		t.Error("no Services: text generated")
	}
	for _, tc := range []struct {
		n, backends int
		position    string
	}{{1, 1, results.PositionLast}, {5, 4, results.PositionFirst}, {5, 4, results.PositionLast}, {300, 2, results.PositionLast}} {
		p := results.Params{Datapath: "iptables", Services: tc.n, ServiceBackends: tc.backends, ServicePosition: tc.position}
		svcs, sls, err := service.Parse([]byte(serviceText(p)), "generated")
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		r, err := service.Resolve(spec, svcs, sls, nil)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if len(r.Services) != tc.n {
			t.Errorf("%+v: %d Services", tc, len(r.Services))
		}
		// The Table is in the proxies' order: the measured Service's
		// frontends come first or last.
		fs := r.Table.Frontends
		want := "default/" + measuredService(p)
		first, last := fs[0].Service, fs[len(fs)-1].Service
		end, other := last, first
		if tc.position == results.PositionFirst {
			end, other = first, last
		}
		if end != want || tc.n > 1 && other == want {
			t.Errorf("%+v: measured %s, frontends from %s to %s", tc, want, first, last)
		}
		ports := 0
		for _, f := range fs {
			if f.Service != want {
				if len(f.Backends) != tc.backends || f.Port != 80 || f.Backends[0].Port != 8080 || spec.Services.CIDR.Contains(f.Backends[0].IP) {
					t.Errorf("%+v: %s: %d backends %v on port %d, want %d outside the lab on 8080", tc, f.Service, len(f.Backends), f.Backends, f.Port, tc.backends)
				}
				continue
			}
			ports++
			if len(f.Backends) != 1 || f.Backends[0].IP != sv.IP || int(f.Backends[0].Port) != int(f.Port) {
				t.Errorf("%+v: measured port %d/%s goes to %v, want the server on the same port", tc, f.Port, f.Protocol, f.Backends)
			}
		}
		if ports != 2*results.MaxFlows+2 {
			t.Errorf("%+v: the measured Service has %d ports, want the %d iperf3 ports and rr's, TCP and UDP", tc, ports, results.MaxFlows)
		}
	}
}

// TestServiceKeys: the service keys' defaults and refusals.
func TestServiceKeys(t *testing.T) {
	base := "workloads: [{kind: tcp-crr}]\n"
	for _, tc := range []struct{ src, want string }{
		{base + "matrix: {services: [-1]}\n", "matrix.services[0]: -1: between 0 and 50000"},
		{base + "matrix: {services: [1], serviceProxy: [ipvs]}\n", `matrix.serviceProxy[0]: service proxy "ipvs" is not available`},
		{base + "matrix: {services: [1], serviceProxy: [ebpf]}\n", "matrix.serviceProxy: the ebpf service proxy is the eBPF datapath's own programs: it needs the ebpf datapath"},
		{base + "matrix: {services: [1], servicePosition: [middle]}\n", `matrix.servicePosition[0]: "middle": first or last`},
		{base + "matrix: {services: [1], serviceBackends: [0]}\n", "matrix.serviceBackends[0]: 0: between 1 and 64"},
		{base + "matrix: {services: [1], datapath: [ebpf], serviceProxy: [none]}\n", "matrix.serviceProxy: 1 Services need a service proxy"},
		{base + "matrix: {services: [1], datapath: [ebpf], serviceProxy: [iptables]}\n", "matrix.serviceProxy: the iptables service proxy translates in netfilter's PREROUTING"},
		{base + "matrix: {topology: [chain], services: [1]}\n", "matrix.services: a chain has no endpoints to serve Services from"},
	} {
		_, err := Parse([]byte(tc.src), "x.yaml", false)
		if err == nil || !strings.Contains(err.Error(), "x.yaml: "+tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
	pts := parsePoints(t, base+"matrix: {datapath: [nftables], services: [0, 10]}\n", "x.yaml")
	var keys []string
	for _, p := range pts {
		keys = append(keys, labKey(p.Params))
		if p.Params.Services == 10 && (p.Params.ServiceProxy != "nftables" || p.Params.ServiceBackends != 1 || p.Params.ServicePosition != results.PositionLast) {
			t.Errorf("defaults: %+v", p.Params)
		}
	}
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Errorf("0 and 10 Services on the datapath's own proxy should share a lab: %q", keys)
	}
}

// servicesExp sweeps Services on both netfilter proxies: connections go
// through the measured Service's cluster IP, the Services are installed
// once per point and their update timed.
const servicesExp = `
name: services
warmup: 0s
duration: 1s
repetitions: 1
seed: 3
workloads:
  - {kind: tcp-crr}
  - {kind: udp-rr}
  - {kind: tcp-stream}
  - {kind: ping, count: 3}
matrix: {datapath: [iptables, nftables], services: [0, 50], serviceBackends: [4]}
`

// TestRunThroughServices: every workload runs with and without 50
// Services, on both proxies; with them, the connections (not ping) go to
// the measured Service's cluster IP, and the Services' installation is
// recorded with the lab's build.
func TestRunThroughServices(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	out := filepath.Join(t.TempDir(), "run")
	r, err := runShort(t, context.Background(), servicesExp, Options{Out: out, LabName: "t-exp-svc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Points) != 16 {
		t.Fatalf("%d points, want 16", len(r.Points))
	}
	for _, p := range r.Points {
		if p.Status != results.PointDone || len(p.Samples) != 1 {
			t.Errorf("%s (%s %s %s): %s: %s", p.ID, p.Series, p.Params.Text(), p.Workload.Name(), p.Status, p.Error)
			continue
		}
		log, err := os.ReadFile(filepath.Join(out, "logs", p.ID+"-r0.log"))
		if err != nil {
			t.Fatal(err)
		}
		// Cluster IPs come from 10.96.0.0/16; the server is in a pod CIDR.
		viaService := strings.Contains(string(log), " 10.96.")
		if want := p.Params.Services > 0 && p.Workload.Kind != results.Ping; viaService != want {
			t.Errorf("%s (%s %s): connects through a cluster IP: %v, want %v:\n%s", p.ID, p.Params.Text(), p.Workload.Kind, viaService, want, log)
		}
		if p.Workload.Kind == results.TCPCRR {
			if m := p.Samples[0].Metrics; m["connect_p50_us"] <= 0 || m["connect_p50_us"] > m["latency_p50_us"] {
				t.Errorf("%s: connect p50 %v, transaction p50 %v", p.ID, m["connect_p50_us"], m["latency_p50_us"])
			}
		}
	}
	// The points of a lab run in a shuffled order: the Services are
	// replaced whenever the next point needs another set.
	for _, b := range r.Builds {
		installs := 0
		for _, a := range b.ServiceApply {
			if a.Error != "" || a.Services == 50 && (a.Backends != 4 || a.Seconds <= 0) || a.Services != 50 && a.Services != 0 {
				t.Errorf("build %s: service install %+v", b.Params.Datapath, a)
			}
			if a.Services == 50 {
				installs++
			}
		}
		if installs == 0 {
			t.Errorf("build %s: 50 Services never installed: %+v", b.Params.Datapath, b.ServiceApply)
		}
	}
}

// TestScheduleInstallsEachSetOnce: in a round, a lab's points that share
// their Services run one after the other, so each set is installed once.
func TestScheduleInstallsEachSetOnce(t *testing.T) {
	pts := parsePoints(t, servicesExp, "x.yaml")
	byID := map[string]results.Point{}
	for _, p := range pts {
		byID[p.ID] = p
	}
	for seed := range int64(5) {
		jobs := schedule(pts, 3, mrand.New(mrand.NewSource(seed)))
		installs := map[string]int{} // round, lab, set -> runs of consecutive points
		prev := ""
		for _, j := range jobs {
			p := byID[j.Point]
			k := fmt.Sprint(j.Repetition, labKey(p.Params), serviceSet(p.Params))
			if k != prev {
				installs[k]++
			}
			prev = k
		}
		for k, n := range installs {
			if n != 1 {
				t.Errorf("seed %d: %s installed %d times in its round", seed, k, n)
			}
		}
	}
}
