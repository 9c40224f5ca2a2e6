package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// TestControlPlane brings a control plane up, schedules a pod onto a chosen
// kwok node, execs into it with both of client-go's executors and checks
// that nothing is left behind.
func TestControlPlane(t *testing.T) {
	begin := time.Now()
	var c *Cluster
	// Registered before Start's cleanup, so it runs after it.
	t.Cleanup(func() {
		if c == nil {
			return
		}
		checkGone(t, c)
		t.Logf("whole test: %v", time.Since(begin).Round(time.Millisecond))
	})
	c = Start(t, Options{Nodes: 2, NodeLabels: map[string]map[string]string{"kwok-node-1": {"cnlab.io/host": "flip"}}})
	testCluster(t, c)
}

// checkGone checks that nothing of a stopped cluster is left.
func checkGone(t *testing.T, c *Cluster) {
	for _, p := range c.procs {
		if p.groupAlive() {
			t.Errorf("process group of %s (pid %d) still has processes", p.name, p.cmd.Process.Pid)
		}
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		for _, pid := range pidsOf(func(argv []string) bool {
			return filepath.Base(argv[0]) == name && slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, c.Dir) })
		}) {
			t.Errorf("%s (pid %d) of this cluster survived cleanup", name, pid)
		}
	}
	if _, err := os.Stat(c.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind (stat: %v)", c.Dir, err)
	}
}

func testCluster(t *testing.T, c *Cluster) {
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil || raw.CurrentContext != ContextName || len(raw.Contexts) != 1 {
		t.Fatalf("kubeconfig %s: context %q of %d, %v", c.Kubeconfig, raw.CurrentContext, len(raw.Contexts), err)
	}
	if want := []string{"kwok-node-0", "kwok-node-1"}; !slices.Equal(c.Nodes, want) {
		t.Fatalf("Nodes = %v, want %v", c.Nodes, want)
	}
	n1, err := cs.CoreV1().Nodes().Get(ctx, "kwok-node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n1.Labels["cnlab.io/host"] != "flip" || len(n1.Spec.Taints) != 0 {
		t.Fatalf("kwok-node-1: labels %v, taints %v", n1.Labels, n1.Spec.Taints)
	}

	// RBAC is on: a user without bindings may not list pods.
	nobody := rest.CopyConfig(cfg)
	nobody.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	ncs, err := kubernetes.NewForConfig(nobody)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ncs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list pods as an unbound user: %v, want Forbidden", err)
	}

	ns := "k8stest"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": "kwok-node-1"},
			Containers: []corev1.Container{{
				Name: "agent", Image: "example.invalid/agent:1", WorkingDir: "/pod-workdir",
				Env: []corev1.EnvVar{{Name: "CNLAB_POD_ENV", Value: "from-pod"}},
			}},
		},
	}
	// The namespace's default ServiceAccount comes a moment after the
	// namespace; admission refuses pods until then.
	for {
		_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil || !apierrors.IsForbidden(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	var ip netip.Addr
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get pod: %v", err)
		}
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			if p.Spec.NodeName != "kwok-node-1" {
				t.Fatalf("pod scheduled onto %q, want kwok-node-1", p.Spec.NodeName)
			}
			ip, err = netip.ParseAddr(p.Status.PodIP)
			if err != nil || !netip.MustParsePrefix(PodCIDR).Contains(ip) {
				t.Fatalf("pod IP %q not in %s", p.Status.PodIP, PodCIDR)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("pod not Running: phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("pod agent Running on kwok-node-1 with IP %s", ip)

	work := filepath.Join(c.Dir, "kwok")
	for i, kind := range []string{"websocket", "spdy"} {
		t.Run(kind, func(t *testing.T) {
			x := executor{cfg: cfg, cs: cs, kind: kind, ns: ns, pod: "agent"}
			testExec(t, x, work, 3000+10*i)
		})
	}

	if err := cs.CoreV1().Pods(ns).Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("namespace %s not gone: %v", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testExec checks how exec behaves through this apiserver and kwok. Where
// kwok differs from a real kubelet the test pins kwok's behaviour down, so
// that a change of it shows.
func testExec(t *testing.T, x executor, work string, tag int) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()

	// stdout and stderr; the command runs in kwok's working directory and
	// environment, not the pod's workingDir and env.
	out, errOut, err := x.run(ctx, nil, "sh", "-c", `echo out; echo err >&2; echo "env=$CNLAB_POD_ENV"; pwd`)
	if err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, errOut)
	}
	if want := "out\nenv=\n" + work + "\n"; out != want || errOut != "err\n" {
		t.Errorf("stdout %q, stderr %q; want %q, %q", out, errOut, want, "err\n")
	}

	// stdin streamed in, read to a known length.
	payload := strings.Repeat("cnlab stdin\n", 20000)
	file := "stdin-" + x.kind
	_, errOut, err = x.run(ctx, strings.NewReader(payload), "sh", "-c", fmt.Sprintf("head -c %d > %s", len(payload), file))
	if err != nil {
		t.Errorf("exec head with stdin: %v (stderr %q)", err, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(work, file)); err != nil || string(b) != payload {
		t.Errorf("file written by head: %d bytes of %d, %v", len(b), len(payload), err)
	}

	// kwok never closes the command's stdin when the client's ends: a
	// command reading to EOF (cat, tee) gets all the data and then waits
	// for ever, the exec with it.
	teeFile := filepath.Join(work, "tee-"+x.kind)
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	_, _, err = x.run(sctx, strings.NewReader(payload), "tee", teeFile)
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("exec tee with stdin returned %v; kwok closes stdin now?", err)
	}
	if b, err := os.ReadFile(teeFile); err != nil || string(b) != payload {
		t.Errorf("file written by tee: %d bytes of %d, %v", len(b), len(payload), err)
	}
	stopByExec(ctx, t, x, []string{"tee", teeFile})

	// A non-zero exit: kwok reports it as an internal error whose message
	// ends in "exit status N", not as the CodeExitError of a real kubelet.
	out, _, err = x.run(ctx, nil, "sh", "-c", "echo partial; exit 3")
	var code utilexec.CodeExitError
	t.Logf("exit 3: stdout %q, error %T %q", out, err, err)
	if err == nil || out != "partial\n" || errors.As(err, &code) || !strings.HasSuffix(err.Error(), "exit status 3") {
		t.Errorf("exit 3: stdout %q, error %T %v", out, err, err)
	}

	// Cancelling a long-running exec ends the stream but not the local
	// process: it runs on until stopped (here by a second exec) or until
	// kwok's teardown kills its process group.
	sleep := []string{"sleep", strconv.Itoa(tag)}
	lctx, lcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, _, err := x.run(lctx, nil, sleep...)
		done <- err
	}()
	if !waitPids(ctx, sleep, true) {
		lcancel()
		t.Fatalf("%v never started", sleep)
	}
	lcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled exec returned %v", err)
	}
	time.Sleep(time.Second)
	if pids := pidsOf(argvIs(sleep)); len(pids) == 0 {
		t.Errorf("%v ended with its cancelled exec; kwok kills it now?", sleep)
	}
	stopByExec(ctx, t, x, sleep)

	// A server started in the background with its output redirected: the
	// exec returns at once, the process stays.
	bg := []string{"sleep", strconv.Itoa(tag + 1)}
	start := time.Now()
	out, _, err = x.run(ctx, nil, "sh", "-c", strings.Join(bg, " ")+" >/dev/null 2>&1 & echo $!")
	if err != nil || time.Since(start) > 3*time.Second {
		t.Fatalf("background exec: %v after %v", err, time.Since(start))
	}
	if pids := pidsOf(argvIs(bg)); len(pids) != 1 || strconv.Itoa(pids[0]) != strings.TrimSpace(out) {
		t.Errorf("background %v: pids %v, exec printed %q", bg, pids, out)
	}
	stopByExec(ctx, t, x, bg)

	// Without the redirection the exec lasts as long as the background
	// process holds its stdout.
	start = time.Now()
	if _, _, err = x.run(ctx, nil, "sh", "-c", "sleep 1.5 &"); err != nil {
		t.Errorf("exec sleep &: %v", err)
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Errorf("exec 'sleep 1.5 &' returned after %v, before the sleep ended", d)
	}
}

// stopByExec kills the local processes running argv through another exec
// and waits until they are gone.
func stopByExec(ctx context.Context, t *testing.T, x executor, argv []string) {
	t.Helper()
	pids := pidsOf(argvIs(argv))
	if len(pids) == 0 {
		t.Errorf("%v: not running", argv)
		return
	}
	args := []string{"kill"}
	for _, pid := range pids {
		args = append(args, strconv.Itoa(pid))
	}
	if _, errOut, err := x.run(ctx, nil, args...); err != nil {
		t.Errorf("exec %v: %v (%s)", args, err, errOut)
	}
	if !waitPids(ctx, argv, false) {
		t.Errorf("%v (pids %v) still running after exec kill", argv, pids)
	}
}

// waitPids waits until processes running argv exist (or, with !exist, are
// gone); it returns false when ctx ends first.
func waitPids(ctx context.Context, argv []string, exist bool) bool {
	for {
		if (len(pidsOf(argvIs(argv))) != 0) == exist {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func argvIs(want []string) func([]string) bool {
	return func(argv []string) bool { return slices.Equal(argv, want) }
}

// executor runs commands in a pod through one of client-go's executors.
type executor struct {
	cfg  *rest.Config
	cs   kubernetes.Interface
	kind string // "websocket" or "spdy"
	ns   string
	pod  string
}

func (x executor) run(ctx context.Context, stdin io.Reader, argv ...string) (string, string, error) {
	req := x.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(x.ns).Name(x.pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	var e remotecommand.Executor
	var err error
	if x.kind == "websocket" {
		e, err = remotecommand.NewWebSocketExecutor(x.cfg, "GET", req.URL().String())
	} else {
		e, err = remotecommand.NewSPDYExecutor(x.cfg, "POST", req.URL())
	}
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	err = e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}

// pidsOf returns the processes whose argv match.
func pidsOf(match func(argv []string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}
