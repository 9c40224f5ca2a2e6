package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/testutil"
)

func TestStartMisuse(t *testing.T) {
	if _, err := Start(context.Background(), Options{}); err == nil {
		t.Error("Start without Dir: no error")
	}
	if _, err := Start(context.Background(), Options{Dir: t.TempDir(), Frequency: -1}); err == nil {
		t.Error("Start with negative frequency: no error")
	}
	var p *Profile
	if _, err := p.Stop(); err == nil {
		t.Error("Stop on nil: no error")
	}
}

// TestProfileLoopback profiles 1 s of iperf3 on the loopback.
func TestProfileLoopback(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "perf", "linux-perf")
	testutil.RequireTool(t, "iperf3", "iperf3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	p, err := Start(ctx, Options{Dir: dir, CallGraph: true})
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	srv := exec.CommandContext(ctx, "iperf3", "-s", "-1", "-p", port)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	for try := 0; ; try++ { // until the server listens (a refused connect leaves -1's one test to come)
		out, err := exec.CommandContext(ctx, "iperf3", "-c", "127.0.0.1", "-p", port, "-t", "1").CombinedOutput()
		if err == nil {
			break
		}
		if try == 50 || !strings.Contains(string(out), "refused") {
			t.Errorf("iperf3 client: %v: %s", err, out)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res, err := p.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stop(); err == nil {
		t.Error("second Stop: no error")
	}
	js, _ := json.MarshalIndent(res, "", "  ")
	if !res.Available {
		if testutil.InCI() {
			t.Fatalf("profile unavailable under CI: %s", res.Reason)
		}
		if res.Reason == "" {
			t.Fatalf("unavailable without a reason: %s", js)
		}
		t.Skipf("perf unavailable on this machine: %s", res.Reason)
	}
	t.Logf("event %s, %d samples (%d kernel) in %.2f s, notes %q", res.Event, res.Samples, res.KernelSamples, res.Seconds, res.Notes)
	if res.Samples == 0 || res.KernelSamples == 0 || len(res.Top) == 0 || len(res.Top) > DefaultTop {
		t.Fatalf("empty result: %s", js)
	}
	if len(res.Groups) != len(GroupNames()) {
		t.Errorf("%d groups, want %d", len(res.Groups), len(GroupNames()))
	}
	for _, f := range []string{res.DataFile, res.ReportFile} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// The report's own text parses to the same totals.
	f, err := os.Open(res.ReportFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := ParseReport(f)
	if err != nil || rep.Samples != res.Samples {
		t.Errorf("report file: %d samples, %v", rep.Samples, err)
	}
}

// TestIPTablesCountersNetns reads the counters of a rule that a ping on
// the loopback of a fresh namespace went through.
func TestIPTablesCountersNetns(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "iptables-legacy-save", "iptables")
	name := fmt.Sprintf("cnlab-proftest-%d", os.Getpid())
	if err := netns.Create(name, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Delete(name) })
	ctx := context.Background()
	for _, argv := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"iptables-legacy", "-A", "OUTPUT", "-p", "icmp", "-j", "ACCEPT"},
		{"ping", "-c", "3", "-i", "0.01", "-q", "127.0.0.1"},
	} {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		if err := netns.Start(name, cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
	}
	rules, err := IPTablesCounters(ctx, name, SaveBinary("legacy"))
	if err != nil {
		t.Fatal(err)
	}
	want := results.RuleCounter{Table: "filter", Chain: "OUTPUT", Rule: "-p icmp -j ACCEPT", Packets: 6, Bytes: 6 * 84}
	if len(rules) != 1 || rules[0] != want {
		t.Errorf("rules %+v, want [%+v]", rules, want)
	}
	if _, err := IPTablesCounters(ctx, name+"-missing", ""); err == nil {
		t.Error("missing namespace: no error")
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func TestStartWithoutPerf(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	p, err := Start(context.Background(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if res.Available || res.Reason == "" {
		t.Errorf("without perf: %+v", res)
	}
}

// TestProfileCancel ends a profile through its context: Stop still
// reports what was sampled until then.
func TestProfileCancel(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "perf", "linux-perf")
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	res, err := p.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if !res.Available && testutil.InCI() {
		t.Fatalf("unavailable: %s", res.Reason)
	}
	if res.Available && res.Samples == 0 {
		t.Errorf("no samples: %+v", res)
	}
}
