package experiment

import (
	"context"
	"encoding/csv"
	"github.com/cnlab/cnlab/experiment/results"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/testutil"
	"github.com/cnlab/cnlab/lab"
)

var rrBinary string // a cnlab built for the rr workloads

func TestMain(m *testing.M) {
	var cleanup []func()
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "cnlab-exp-test")
		if err != nil {
			panic(err)
		}
		rrBinary = filepath.Join(dir, "cnlab")
		build := exec.Command("go", "build", "-o", rrBinary, "github.com/cnlab/cnlab/cmd/cnlab")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			panic("build cnlab for the rr workloads: " + err.Error())
		}
		// testutil.Main exits: a defer here would never run.
		cleanup = append(cleanup, func() { os.RemoveAll(dir) })
	}
	testutil.Main(m, cleanup...)
}

// shortExp is a real experiment of about half a minute: every workload on
// the eBPF datapath with and without policies, and a profiled iptables
// point with filler rules.
const shortExp = `
name: short
warmup: 0s
duration: 1s
repetitions: 2
seed: 7
workloads:
  - {kind: tcp-stream}
  - {kind: tcp-rr}
  - {kind: udp-rr, requestSize: 100, responseSize: 200}
  - {kind: ping, count: 3}
sweeps:
  - name: ebpf
    matrix: {datapath: [ebpf], policies: [0, 2]}
  - name: iptables
    matrix: {datapath: [iptables], policies: [20]}
    workloads: [{kind: tcp-stream}]
    profile: true
`

func runShort(t *testing.T, ctx context.Context, src string, o Options) (*results.Results, error) {
	t.Helper()
	s, err := Parse([]byte(src), "short.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	o.RR = []string{rrBinary, "rr"}
	if o.Out == "" {
		o.Out = filepath.Join(t.TempDir(), "run")
	}
	return Run(ctx, s, []byte(src), o)
}

func TestRunEndToEnd(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	testutil.RequireTool(t, "ping", "iputils-ping")
	out := filepath.Join(t.TempDir(), "run")
	r, err := runShort(t, context.Background(), shortExp, Options{Out: out, LabName: "t-exp-e2e"})
	if err != nil {
		t.Fatal(err)
	}
	// The results directory validates and reads back.
	back, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if bad := back.Check(); len(bad) > 0 {
		t.Errorf("results.json does not validate:\n%s", strings.Join(bad, "\n"))
	}
	if back.Status != results.StatusComplete || back.Seed != 7 || back.Experiment.Text != shortExp || len(back.Points) != 9 {
		t.Errorf("status %s, seed %d, %d points", back.Status, back.Seed, len(back.Points))
	}
	rows := 1 // the header
	for _, p := range r.Points {
		// The server is isolated by the policies, and a NetworkPolicy
		// cannot allow ICMP: that ping point fails, and the run goes on.
		if p.Workload.Kind == results.Ping && p.Params.Policies > 0 {
			if p.Status != results.PointFailed || !strings.Contains(p.Error, "no reply") {
				t.Errorf("%s: ping through an isolated server: %s %q", p.ID, p.Status, p.Error)
			}
			continue
		}
		if p.Status != results.PointDone || len(p.Samples) != 2 {
			t.Errorf("%s (%s %s): %s with %d samples: %s", p.ID, p.Series, p.Workload.Name(), p.Status, len(p.Samples), p.Error)
			continue
		}
		for _, s := range p.Samples {
			rows++
			if _, err := os.Stat(filepath.Join(out, s.Log)); err != nil {
				t.Errorf("%s: log %v", p.ID, err)
			}
		}
		sum := p.Summary
		switch p.Workload.Kind {
		case results.TCPStream:
			if s := sum["throughput_gbps"]; s.N != 2 || s.Median < 0.1 || s.CILow > s.Median || s.CIHigh < s.Median {
				t.Errorf("%s: throughput %+v", p.ID, s)
			}
			// Packets counted at the server, and the CPU time per packet.
			if sum["skb_per_s"].N != 2 || sum["skb_per_s"].Median < 1000 || sum["cpu_us_per_packet"].Median <= 0 {
				t.Errorf("%s: skb_per_s %+v, cpu_us_per_packet %+v", p.ID, sum["skb_per_s"], sum["cpu_us_per_packet"])
			}
		case results.TCPRR, results.UDPRR:
			if sum["transactions_per_s"].Median < 100 || sum["latency_p50_us"].Median > sum["latency_p99_us"].Median || sum["cpu_us_per_transaction"].Median <= 0 {
				t.Errorf("%s: rr %+v", p.ID, sum)
			}
		case results.Ping:
			if sum["first_rtt_us"].N != 2 || sum["rtt_us"].Median <= 0 {
				t.Errorf("%s: ping %+v", p.ID, sum)
			}
		}
		if p.Profile {
			checkProfile(t, p)
		}
	}
	f, err := os.Open(filepath.Join(out, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(recs) != rows || len(recs[0]) <= len(results.CSVParams) || recs[0][len(results.CSVParams)-5] != "repetition" {
		t.Errorf("results.csv: %d rows (want %d, one per sample), %v", len(recs), rows, err)
	} else {
		// Every value in the CSV is the one in results.json.
		col := map[string]int{}
		for i, h := range recs[0] {
			col[h] = i
		}
		for _, rec := range recs[1:] {
			for _, p := range back.Points {
				if p.ID != rec[0] {
					continue
				}
				for _, s := range p.Samples {
					if strconv.Itoa(s.Repetition) != rec[col["repetition"]] {
						continue
					}
					for k, v := range s.Metrics {
						if rec[col[k]] != strconv.FormatFloat(v, 'g', -1, 64) {
							t.Errorf("%s rep %d %s: csv %q, json %v", p.ID, s.Repetition, k, rec[col[k]], v)
						}
					}
				}
			}
		}
	}
	var env results.Environment
	if err := files.ReadJSON(filepath.Join(out, "environment.json"), &env); err != nil || env.Kernel == "" || env.Cores < 1 ||
		env.MemoryBytes == 0 || env.Tools["iperf3"] == "" || env.Offloads["tso"] == "" {
		t.Errorf("environment.json: %+v %v", env, err)
	}
	if ref := env.Reference; ref == nil || ref.Error != "" || len(ref.StreamGbps) < 2 || len(ref.RRP50Us) < 2 || ref.StreamGbps[0] <= 0 || ref.RRP50Us[0] <= 0 {
		t.Errorf("environment.json: reference speed %+v", ref)
	} else if !ref.Cached {
		// The run measures the quick reference (not doctor's): its
		// samples, 3 × 1 s and 4 × 0.3 s, about 4.5 s with the iperf3 and
		// rr starts. The time only catches a gross stall: a busy 2-core
		// machine took 7.4 s (the bound was 8 s), so 15 s.
		q := QuickReference
		if len(ref.StreamGbps) != q.StreamSamples || len(ref.RRP50Us) != q.RRSamples || ref.RRSeconds != q.RRDuration.Seconds() {
			t.Errorf("reference speed: %d stream samples, %d rr samples of %g s; want the quick reference's %d, %d of %g s",
				len(ref.StreamGbps), len(ref.RRP50Us), ref.RRSeconds, q.StreamSamples, q.RRSamples, q.RRDuration.Seconds())
		}
		if ref.Seconds > 15 {
			t.Errorf("the reference speed took %.1f s, want about 5", ref.Seconds)
		}
	}
	// The lab builds were recorded, with the policy updates' times.
	applied := false
	for _, b := range back.Builds {
		if b.UpSeconds <= 0 || b.Error != "" {
			t.Errorf("build %+v", b)
		}
		applied = applied || len(b.PolicyApply) > 0
	}
	if !applied {
		t.Error("no policy update recorded")
	}
	if labs, _ := lab.Labs(); slices.Contains(labs, "t-exp-e2e") {
		t.Error("the lab is still up after the run")
	}
}

func checkProfile(t *testing.T, p results.PointResult) {
	t.Helper()
	pr := p.Prof
	if pr == nil || pr.Kernel == nil {
		t.Errorf("%s: no profile: %+v", p.ID, pr)
		return
	}
	if !pr.Kernel.Available {
		if testutil.InCI() {
			t.Errorf("%s: perf unavailable under CI: %s", p.ID, pr.Kernel.Reason)
		}
		return
	}
	if pr.Kernel.Samples == 0 || len(pr.Kernel.Groups) == 0 || pr.Metrics["throughput_gbps"] <= 0 {
		t.Errorf("%s: empty profile %+v", p.ID, pr)
	}
	// The filler rules are in the host's FORWARD path: the counters show
	// the run's packets passing the established-accept rule.
	var pkts uint64
	for _, rules := range pr.IPTables {
		for _, rc := range rules {
			if strings.Contains(rc.Rule, "ESTABLISHED") {
				pkts += rc.Packets
			}
		}
	}
	if pkts < 1000 {
		t.Errorf("%s: %d packets counted by the established rule during the profiled run", p.ID, pkts)
	}
}

// lockedWriter collects progress lines and calls on for each write.
type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
	on func(string)
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.b.Write(p)
	s := w.b.String()
	w.mu.Unlock()
	w.on(s)
	return len(p), nil
}

// TestRunInterrupted cancels a run in the middle of its third job's
// sample: the results file is valid and marked interrupted, the finished
// samples are kept, and neither the lab nor a measuring process is left.
func TestRunInterrupted(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iperf3", "iperf3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	w := &lockedWriter{on: func(s string) {
		if strings.Contains(s, "[3/") {
			once.Do(func() { time.AfterFunc(400*time.Millisecond, cancel) })
		}
	}}
	out := filepath.Join(t.TempDir(), "run")
	r, err := runShort(t, ctx, shortExp, Options{Out: out, LabName: "t-exp-int", Progress: w})
	if err != ErrInterrupted {
		t.Fatalf("err %v, want ErrInterrupted", err)
	}
	back, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if bad := back.Check(); len(bad) > 0 {
		t.Errorf("partial results.json does not validate:\n%s", strings.Join(bad, "\n"))
	}
	samples, pending := 0, 0
	for _, p := range back.Points {
		samples += len(p.Samples)
		if p.Status == results.PointPending {
			pending++
		}
	}
	if back.Status != results.StatusInterrupted || back.FinishedAt == nil || samples < 1 || samples > 2 || pending == 0 {
		t.Errorf("status %s, %d samples kept, %d points pending", back.Status, samples, pending)
	}
	if r.Status != back.Status {
		t.Errorf("returned %s, wrote %s", r.Status, back.Status)
	}
	if labs, _ := lab.Labs(); slices.Contains(labs, "t-exp-int") {
		t.Error("the lab is still up after the interruption")
	}
	if left := measuring(); len(left) > 0 {
		t.Errorf("processes left running: %v", left)
	}
}

// measuring lists the running processes that a run starts: iperf3, the rr
// tool, ping and perf.
func measuring() []string {
	var out []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || len(cmd) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		base := filepath.Base(argv[0])
		if base == "iperf3" || base == "ping" || argv[0] == rrBinary || base == "perf" && len(argv) > 1 && argv[1] == "record" {
			out = append(out, d.Name()+": "+strings.Join(argv, " "))
		}
	}
	return out
}

func TestRunRefusesUsedDirectory(t *testing.T) {
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "results.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Parse([]byte(shortExp), "short.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), s, []byte(shortExp), Options{Out: out})
	if err == nil || !input.Is(err) || !strings.Contains(err.Error(), "already holds a run") {
		t.Errorf("err %v", err)
	}
}
