package experiment

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/input"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
)

// TestUnderLoadDefaults: tcp-rr-under-load takes 4 load streams and 1/1
// transactions unless told.
func TestUnderLoadDefaults(t *testing.T) {
	s, err := Parse([]byte("warmup: 1s\nworkloads: [{kind: tcp-rr-under-load}, {kind: tcp-rr-under-load, streams: 1, requestSize: 100, responseSize: 200}]\n"), "x.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.Workloads[0], s.Workloads[1]
	if a.Streams != DefaultLoadStreams || a.RequestSize != 1 || a.ResponseSize != 1 || a.Flows != 0 {
		t.Errorf("defaults: %+v", a)
	}
	if b.Streams != 1 || b.RequestSize != 100 || b.ResponseSize != 200 {
		t.Errorf("given: %+v", b)
	}
	if got := a.Name(); got != "tcp-rr-under-load 1/1 4streams" {
		t.Errorf("name %q", got)
	}
	if got := results.Headline(results.TCPRRUnderLoad); got != "latency_p50_us" {
		t.Errorf("headline %q", got)
	}
	for _, m := range results.PrimaryMetrics(results.TCPRRUnderLoad) {
		if !slices.Contains(results.MetricNames(), m) {
			t.Errorf("primary metric %s is not registered", m)
		}
	}
}

// TestUnderLoadBadInput: one error naming the file and the field.
func TestUnderLoadBadInput(t *testing.T) {
	cases := []struct{ src, want string }{
		{"warmup: 1s\nworkloads: [{kind: tcp-rr-under-load, streams: 65}]\n", "x.yaml: workloads[0].streams: 65: between 1 and 64"},
		{"warmup: 1s\nworkloads: [{kind: tcp-rr-under-load, streams: -1}]\n", "x.yaml: workloads[0].streams: -1: between 1 and 128"},
		{"warmup: 1s\nworkloads: [{kind: tcp-rr-under-load, requestSize: 70000}]\n", "x.yaml: workloads[0].requestSize: 70000 bytes: between 1 and 65000"},
		{"warmup: 1s\nworkloads: [{kind: tcp-rr-under-load, flows: 2}]\n", "x.yaml: workloads[0].flows: applies to tcp-stream and udp-stream workloads only"},
		{"warmup: 1s\nworkloads: [{kind: tcp-rr-under-load, length: 100}]\n", "x.yaml: workloads[0].length: applies to tcp-stream and udp-stream workloads only"},
		{"warmup: 1s\nworkloads: [{kind: tcp-rr-under-load, count: 3}]\n", "x.yaml: workloads[0].count: applies to ping workloads only"},
		{"warmup: 0s\nworkloads: [{kind: tcp-rr-under-load}]\n", "x.yaml: warmup: 0s: the tcp-rr-under-load workload (workloads[0]) needs a warm-up of at least 1s"},
		{"warmup: 1s\nduration: 1500ms\nworkloads: [{kind: tcp-rr-under-load}]\n", "x.yaml: duration: 1.5s: iperf3 (the tcp-rr-under-load workload) measures whole seconds"},
		{"warmup: 1500ms\nworkloads: [{kind: tcp-rr-under-load}]\n", "x.yaml: warmup: 1.5s: iperf3 (the tcp-rr-under-load workload) omits whole seconds"},
		{"warmup: 1s\nworkloads: [{kind: tcp-rr-under-load}]\nsweeps: [{name: a, workloads: [{kind: tcp-rr-under-load, streams: 100}]}]\n", "x.yaml: sweeps[0].workloads[0].streams: 100: between 1 and 64"},
		// streams elsewhere still names the workloads that take them
		{"workloads: [{kind: tcp-rr, streams: 2}]\n", "x.yaml: workloads[0].streams: applies to tcp-stream and udp-stream workloads only, and to tcp-rr-under-load"},
		{"workloads: [{kind: ping, requestSize: 2}]\n", "x.yaml: workloads[0].requestSize: applies to tcp-rr, tcp-crr, udp-rr and tcp-rr-under-load workloads only"},
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
}

// TestRunUnderLoad runs one tcp-rr-under-load point with one load stream
// for a second: rr's latency and the stream's throughput are both there
// and plausible, and no lab or measuring process is left.
func TestRunUnderLoad(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	const exp = `
name: underload
warmup: 1s
duration: 1s
repetitions: 1
workloads: [{kind: tcp-rr-under-load, streams: 1}]
matrix: {datapath: [ebpf]}
`
	out := filepath.Join(t.TempDir(), "run")
	r, err := runShort(t, context.Background(), exp, Options{Out: out, LabName: "t-exp-rrul"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Points) != 1 {
		t.Fatalf("%d points", len(r.Points))
	}
	p := r.Points[0]
	if p.Status != results.PointDone || len(p.Samples) != 1 {
		t.Fatalf("%s: %s with %d samples: %s", p.ID, p.Status, len(p.Samples), p.Error)
	}
	m := p.Samples[0].Metrics
	for _, k := range []string{"latency_p50_us", "latency_p99_us", "latency_mean_us", "transactions_per_s", "throughput_gbps", "retransmits"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %s in %v", k, m)
		}
	}
	if m["throughput_gbps"] < 0.05 || m["transactions_per_s"] < 10 || m["latency_p50_us"] <= 0 || m["latency_p50_us"] > m["latency_p99_us"] {
		t.Errorf("implausible: %v", m)
	}
	// Its seconds: rr's latency with the load's throughput beside it.
	if s, err := results.LoadSeries(out, p.Samples[0].Series); err != nil || len(s.T) != 1 ||
		len(s.Values["latency_p99_us"]) != 1 || len(s.Values["throughput_gbps"]) != 1 || !(s.Values["throughput_gbps"][0] > 0) {
		t.Errorf("series: %+v %v", s, err)
	}
	if labs, _ := lab.Labs(); slices.Contains(labs, "t-exp-rrul") {
		t.Error("the lab is still up after the run")
	}
	if left := measuringOurs(); len(left) > 0 {
		t.Errorf("processes left running: %v", left)
	}
}

// TestRunUnderLoadInterrupted: Ctrl-C in the middle of a
// tcp-rr-under-load sample stops the rr client and every load stream, and
// takes the lab down.
func TestRunUnderLoadInterrupted(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	const exp = `
name: underload-int
warmup: 1s
duration: 2s
repetitions: 1
workloads: [{kind: tcp-rr-under-load, streams: 2}]
matrix: {datapath: [ebpf]}
`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel once the rr client and the load clients all run.
	go func() {
		for ctx.Err() == nil {
			rr, load := 0, 0
			for _, p := range measuringOurs() {
				rr += strings.Count(p, rrBinary+" rr client")
				load += strings.Count(p, "iperf3 -c")
			}
			if rr == 1 && load == 2 {
				time.Sleep(500 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	_, err := runShort(t, ctx, exp, Options{LabName: "t-exp-rrul-int"})
	if err != ErrInterrupted {
		t.Fatalf("err %v, want ErrInterrupted", err)
	}
	if labs, _ := lab.Labs(); slices.Contains(labs, "t-exp-rrul-int") {
		t.Error("the lab is still up after the interruption")
	}
	if left := measuringOurs(); len(left) > 0 {
		t.Errorf("processes left running: %v", left)
	}
}

// measuringOurs is measuring() without the processes of other tests and
// runs on the machine: only this test process's children.
func measuringOurs() []string {
	var out []string
	for _, p := range measuring() {
		pid, _, _ := strings.Cut(p, ":")
		stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid ...
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
				out = append(out, p)
			}
		}
	}
	return out
}
