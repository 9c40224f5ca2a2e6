package kube

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/k8stest"
	"github.com/cnlab/cnlab/internal/testutil"
)

// binDir holds the cnlab binary the integration tests build once.
var (
	binDir   string
	binOnce  sync.Once
	binError error
)

func TestMain(m *testing.M) {
	testutil.Main(m, func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	})
}

// buildCnlab builds the cnlab binary the run streams into the agent pods
// (a test binary would run tests there), once per test binary.
func buildCnlab(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binError = os.MkdirTemp("", "cnlab-kube-test-")
		if binError != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "cnlab"), "../cmd/cnlab").CombinedOutput()
		if err != nil {
			binError = fmt.Errorf("build cnlab: %v\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return filepath.Join(binDir, "cnlab")
}

// TestSmokeRunOnControlPlane runs experiments/k8s-smoke.yaml's quick
// block through the kubernetes backend against a real control plane on
// this machine (etcd, kube-apiserver, controller-manager, scheduler) with
// two kwok nodes, whose pods' commands run as local processes on their
// 127.10.0.x addresses. kwok has no CNI: the policies are applied (and
// validated by the API server) but never enforced, which the enforcement
// probe must report — the run measures anyway with --unenforced.
func TestSmokeRunOnControlPlane(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{Nodes: 2})
	bin := buildCnlab(t)
	out := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(bin, "run", "../experiments/k8s-smoke.yaml", "--quick", "--backend", "kubernetes",
		"--kubeconfig", c.Kubeconfig, "--out", out, "--lab", "xp-smoke", "--unenforced", "--enforce-timeout", "3s", "--image", "example.org/unused:1", "--report")
	cmd.Env = append(os.Environ(), "CNLAB_TEST_MAIN=") // the real binary, whatever the environment
	o, err := cmd.CombinedOutput()
	t.Logf("cnlab run:\n%s", o)
	if err != nil {
		t.Fatalf("cnlab run --backend kubernetes: %v", err)
	}
	r, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if bad := r.Check(); len(bad) > 0 {
		t.Errorf("results.json does not validate:\n%s", strings.Join(bad, "\n"))
	}
	if r.Backend != results.BackendKubernetes || r.Status != results.StatusComplete || r.Cluster == nil || len(r.Cluster.Nodes) != 2 || r.Cluster.CNI != "unknown" {
		t.Fatalf("run: backend %q, status %q, cluster %+v; want kubernetes, complete, 2 nodes, CNI unknown (kwok has none)", r.Backend, r.Status, r.Cluster)
	}
	checkSmokePoints(t, r)
	for _, p := range r.Points {
		if len(p.Samples) == 0 {
			continue
		}
		if _, ok := p.Samples[0].Metrics["system_cpu_pct"]; !ok {
			t.Errorf("%s: no system_cpu_pct", p.ID)
		}
	}
	// Every deployment applied its policies: with none, the probe saw the
	// client connect (enforced: the model allows everything); with 2,
	// the server's isolation was not enforced (no CNI), and said so.
	var none, two int
	for _, b := range r.Builds {
		if len(b.Nodes) != 2 || b.Namespaces["default"] != "cnlab-xp-smoke-default" {
			t.Errorf("build %s: nodes %v, namespaces %v", b.Key, b.Nodes, b.Namespaces)
		}
		for _, a := range b.PolicyApply {
			switch {
			case a.Error != "":
				t.Errorf("build %s: apply %+v", b.Key, a)
			case a.Policies == 0 && a.Enforced != nil && *a.Enforced:
				none++
			case a.Policies == 2 && a.Enforced != nil && !*a.Enforced && strings.Contains(a.Mismatch, "port 20001/tcp connects, the policies deny it"):
				two++
			default:
				t.Errorf("build %s: apply %+v", b.Key, a)
			}
		}
	}
	if none == 0 || two == 0 {
		t.Errorf("policy applies: %d enforced without policies, %d unenforced with 2; want some of each", none, two)
	}
	if !strings.Contains(string(o), "does not enforce the policies") {
		t.Error("the run did not warn that the cluster does not enforce the policies")
	}
	// The report says the policies were not enforced, and shows the cluster.
	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"did not enforce the policies", "kube-proxy", "node kwok-node-1"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html does not say %q", want)
		}
	}
	// Nothing of the run is left on the cluster, nor as a process here.
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	nss, err := cl.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{LabelSelector: RunLabel})
	if err != nil {
		t.Fatal(err)
	}
	if len(nss.Items) != 0 {
		t.Errorf("%d namespaces of the run left", len(nss.Items))
	}
	// kwok stops a deleted pod's processes on its own time: give them
	// 10 s (the run is over; one still there then is left).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := exec.Command("pgrep", "-af", "iperf3 -s|cnlab-[0-9a-f]+/cnlab").Output()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("processes started in the pods are left:\n%s", out)
			break
		}
	}
	// cnlab down finds nothing left.
	down := exec.Command(bin, "down", "--backend", "kubernetes", "--all", "--kubeconfig", c.Kubeconfig)
	if o, err := down.CombinedOutput(); err != nil || !strings.Contains(string(o), "nothing to do") {
		t.Errorf("cnlab down --backend kubernetes --all: %v\n%s", err, o)
	}
}

// checkSmokePoints checks the 10 points of k8s-smoke.yaml's quick block:
// each done with one sample, on the nodes its placement says, with the
// headline metrics of its workload.
func checkSmokePoints(t *testing.T, r *results.Results) {
	t.Helper()
	if len(r.Points) != 10 {
		t.Errorf("%d points, want 10", len(r.Points))
	}
	for _, p := range r.Points {
		if p.Status != results.PointDone || len(p.Samples) != 1 {
			t.Errorf("%s %s %s: %s, %d samples (%s)", p.ID, p.Params.Text(), p.Workload.Kind, p.Status, len(p.Samples), p.Error)
			continue
		}
		same := p.Nodes["client"] == p.Nodes["server"]
		if p.Nodes["client"] == "" || same != (p.Params.Placement == results.PlacementSameNode) {
			t.Errorf("%s %s: nodes %v", p.ID, p.Params.Placement, p.Nodes)
		}
		m := p.Samples[0].Metrics
		switch p.Workload.Kind {
		case results.TCPRR:
			if m["transactions_per_s"] <= 0 || m["latency_p50_us"] <= 0 {
				t.Errorf("%s tcp-rr: %v", p.ID, m)
			}
		case results.TCPStream:
			if m["throughput_gbps"] <= 0 {
				t.Errorf("%s tcp-stream: %v", p.ID, m)
			}
		case results.Ping:
			if m["first_rtt_us"] <= 0 || m["loss_pct"] != 0 {
				t.Errorf("%s ping: %v", p.ID, m)
			}
		}
	}
}

// TestInterruptAndCrashOnControlPlane: Ctrl-C during a run on a cluster
// keeps the finished points, marks the run interrupted and deletes the
// run's namespaces; after a crash (kill -9) they are left, and cnlab down
// --backend kubernetes removes them, and only them. The agents run in
// the node's network (network: host).
func TestInterruptAndCrashOnControlPlane(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{Nodes: 2})
	bin := buildCnlab(t)
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exp := filepath.Join(t.TempDir(), "long.yaml")
	if err := os.WriteFile(exp, []byte("name: long\nwarmup: 0s\nduration: 1s\nrepetitions: 50\nworkloads: [{kind: tcp-rr}]\nmatrix: {placement: [same-node], network: [host]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Someone else's namespace that looks like cnlab's: never touched.
	theirs := "cnlab-xp-crash-other"
	if _, err := cl.CoreV1().Namespaces().Create(ctx, nsObject(theirs), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := func(run string) (*exec.Cmd, *bytes.Buffer, string) {
		out := filepath.Join(t.TempDir(), run)
		cmd := exec.Command(bin, "run", exp, "--backend", "kubernetes", "--kubeconfig", c.Kubeconfig, "--out", out, "--lab", run)
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until samples are being measured.
		deadline := time.Now().Add(90 * time.Second)
		for !strings.Contains(b.String(), "rep 3") {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("run %s measured nothing in 90 s:\n%s", run, b.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		return cmd, &b, out
	}
	runNamespaces := func(run string) int {
		l, err := cl.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: RunLabel + "=" + run})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ns := range l.Items {
			if ns.DeletionTimestamp == nil {
				n++
			}
		}
		return n
	}

	cmd, b, out := start("xp-int")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Errorf("Ctrl-C: %v, want exit 130\n%s", err, b.String())
	}
	r, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != results.StatusInterrupted || len(r.Points) != 1 || len(r.Points[0].Samples) < 2 || r.Points[0].Params.Network != results.NetworkHost {
		t.Errorf("after Ctrl-C: status %s, %d points, samples %d; want interrupted, the finished samples kept", r.Status, len(r.Points), len(r.Points[0].Samples))
	}
	if n := runNamespaces("xp-int"); n != 0 {
		t.Errorf("%d namespaces of the interrupted run left", n)
	}
	// kwok leaves a process started by exec running when its stream
	// closes: the run stopped them in the pods (by another exec) before
	// it ended.
	if o, err := exec.Command("pgrep", "-af", "kwok/tmp/cnlab-[0-9a-f]+/cnlab (rr|agent)").Output(); err == nil {
		t.Errorf("processes of the interrupted run left in its pods:\n%s", o)
	}

	cmd, b, _ = start("xp-crash")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if n := runNamespaces("xp-crash"); n != 1 {
		t.Fatalf("after kill -9: %d namespaces of the run, want its 1 left behind\n%s", n, b.String())
	}
	// The run's reaper, whose stdin closed when the run died, stopped its
	// commands in the pods, and ended.
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, err := exec.Command("pgrep", "-af", "cnlab agent reap|kwok/tmp/cnlab-[0-9a-f]+/cnlab (rr|agent)").Output()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after kill -9, processes of the run are left:\n%s", o)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	o, err := exec.Command(bin, "down", "--backend", "kubernetes", "xp-crash", "--kubeconfig", c.Kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(o), "namespace cnlab-xp-crash-default deleted") {
		t.Errorf("cnlab down --backend kubernetes xp-crash: %v\n%s", err, o)
	}
	if n := runNamespaces("xp-crash"); n != 0 {
		t.Errorf("%d namespaces left after down", n)
	}
	if _, err := cl.CoreV1().Namespaces().Get(ctx, theirs, metav1.GetOptions{}); err != nil {
		t.Errorf("the namespace cnlab did not create: %v", err)
	}
	// A run whose namespace name is taken by one cnlab did not create is
	// refused, and the namespace is left alone.
	if _, err := cl.CoreV1().Namespaces().Create(ctx, nsObject("cnlab-xp-taken-default"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o, err = exec.Command(bin, "run", exp, "--backend", "kubernetes", "--kubeconfig", c.Kubeconfig, "--out", filepath.Join(t.TempDir(), "taken"), "--lab", "xp-taken", "--repetitions", "1").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(o), "--lab: xp-taken: namespace cnlab-xp-taken-default exists and was not created by cnlab") {
		t.Errorf("a run into a namespace not cnlab's: %v, want exit 2 before anything\n%s", err, o)
	}
	// What only the cluster can say is bad input too, before anything.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "flip=nope"}, "--nodes: flip=nope: the cluster has no node nope"},
		{[]string{"--nodes", "flop=kwok-node-0"}, "--nodes: flop=kwok-node-0: the experiment's topologies have no host flop"},
		{[]string{"--context", "nope"}, `--context: "nope" is not a context of`},
	} {
		args := append([]string{"run", exp, "--backend", "kubernetes", "--kubeconfig", c.Kubeconfig, "--out", filepath.Join(t.TempDir(), "x")}, bad.args...)
		o, err := exec.Command(bin, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(o), bad.want) {
			t.Errorf("%v: %v, want exit 2 and %q\n%s", bad.args, err, bad.want, o)
		}
	}
	if got, err := cl.CoreV1().Namespaces().Get(ctx, "cnlab-xp-taken-default", metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("the namespace cnlab did not create: %v", err)
	}
}

func nsObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// TestServicesOnControlPlane: a point's Services are applied to the
// cluster (the API server validates them); kwok runs no kube-proxy, so the
// measured Service never answers and the point fails saying why, with the
// apply recorded.
func TestServicesOnControlPlane(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{Nodes: 1})
	bin := buildCnlab(t)
	exp := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(exp, []byte("name: svc\nwarmup: 0s\nduration: 1s\nrepetitions: 1\nworkloads: [{kind: tcp-crr}]\nmatrix: {topology: [single-host], services: [0, 3], serviceBackends: [2]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "run")
	o, err := exec.Command(bin, "run", exp, "--backend", "kubernetes", "--kubeconfig", c.Kubeconfig, "--out", out, "--lab", "xp-svc", "--enforce-timeout", "2s").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("run: %v, want exit 1 (the Services point fails)\n%s", err, o)
	}
	r, err := results.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Points {
		switch {
		case p.Params.Services == 0 && p.Status != results.PointDone:
			t.Errorf("%s without Services: %s %s", p.ID, p.Status, p.Error)
		case p.Params.Services == 3 && (p.Status != results.PointFailed || !strings.Contains(p.Error, "does not answer on port 12865") || !strings.Contains(p.Error, "svc-00002")):
			t.Errorf("%s with 3 Services: %s %q; want failed, svc-00002 not answering", p.ID, p.Status, p.Error)
		}
	}
	var applied bool
	for _, a := range r.Builds[0].ServiceApply {
		if a.Services == 3 && a.Backends == 2 && a.Seconds > 0 && strings.Contains(a.Error, "does not answer") {
			applied = true
		}
	}
	if !applied {
		t.Errorf("service applies %+v: want the 3 Services applied, then not answering", r.Builds[0].ServiceApply)
	}
}
