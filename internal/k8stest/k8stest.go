// Package k8stest brings a real Kubernetes control plane up on loopback for
// integration tests: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, whose fake nodes run no containers (pods only get
// a Running status and an IP) and run every exec as a local process. The
// binaries are built by scripts/k8s-tools.sh; tests skip without them (and
// fail under CI=true).
//
// Everything listens on 127.0.0.1 on ports chosen at run time. Pods get IPs
// from 127.10.0.0/24, which is local on Linux, so a server started by exec
// "in" a pod is reachable on its pod IP. Clients authenticate with bearer
// tokens (the admin is in system:masters) and verify the apiserver with the
// CA in Dir/pki; authorization is Node,RBAC.
//
// Exec through kwok differs from a real kubelet (TestControlPlane pins it
// down, with client-go's WebSocket and SPDY executors alike):
//   - the command runs with kwok's environment and working directory
//     (Dir/kwok), not the pod's env and workingDir;
//   - the end of the client's stdin never reaches the command: cat or tee
//     read all the data and then wait for ever; read a known length
//     (head -c N) instead;
//   - a non-zero exit comes back as an error "Internal error occurred: ...
//     exit status N", not as client-go's exec.CodeExitError;
//   - cancelling or closing the exec stream does not stop the local
//     process; stop it by another exec (kill PID). Start's cleanup kills
//     kwok's whole process group, so what is left then goes too, unless it
//     left the group (setsid, daemon modes).
package k8stest

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cnlab/cnlab/internal/testutil"
)

// ContextName is the name of the one context in Cluster.Kubeconfig.
const ContextName = "cnlab-test"

// PodCIDR is where kwok takes pod IPs from.
const PodCIDR = "127.10.0.0/24"

// ServiceCIDR is the apiserver's --service-cluster-ip-range.
const ServiceCIDR = "10.96.0.0/16"

// buildCommand is what builds the binaries, named in skip messages.
const buildCommand = "scripts/k8s-tools.sh"

// startTimeout bounds Start: from the first process to a usable cluster.
const startTimeout = 90 * time.Second

//go:embed kwok-stages.yaml
var kwokStages string

// Options of a control plane.
type Options struct {
	Nodes      int                          // fake kwok nodes to create (default 2), named "kwok-node-0", "kwok-node-1", ...
	NodeLabels map[string]map[string]string // extra labels per node name (optional)
}

// Cluster is a running control plane.
type Cluster struct {
	Kubeconfig string   // path of an admin kubeconfig (one context, named "cnlab-test")
	Dir        string   // its working directory (logs of every process in Dir/logs/*.log)
	Nodes      []string // node names, Ready and untainted

	procs []*proc
}

// Bin returns the directory of the built binaries, or "" and the reason
// (scripts/k8s-tools.sh --check says why).
func Bin() (string, error) { return check("--check") }

// CiliumBin returns the directory of the real Cilium's build (agent, CNI
// plugin, bpf/ sources, CRDs), or "" and the reason.
func CiliumBin() (string, error) { return check("--check-cilium") }

// RequireCilium returns CiliumBin's directory, or skips the test (fails it
// under CI=true) when the real Cilium is not built.
func RequireCilium(t testing.TB) string {
	t.Helper()
	return require(t, CiliumBin, "the real Cilium", "")
}

// require returns find's directory, or skips the test (fails it under
// CI=true) saying that what is not built and the command that builds it.
func require(t testing.TB, find func() (string, error), what, cold string) string {
	t.Helper()
	dir, err := find()
	if err != nil {
		if testutil.InCI() {
			t.Fatalf("k8stest: %s not built (%v) and CI=true: run %s", what, err, buildCommand)
		}
		t.Skipf("skipping: %s not built (%v); run %s%s", what, err, buildCommand, cold)
	}
	return dir
}

// check runs scripts/k8s-tools.sh with flag (--check or --check-cilium).
func check(flag string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "k8s-tools.sh"), flag)
	cmd.Dir = root
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errOut.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", errors.New(msg)
	}
	dir := strings.TrimSpace(out.String())
	if dir == "" {
		return "", errors.New("scripts/k8s-tools.sh --check printed no directory")
	}
	return dir, nil
}

// repoRoot finds the directory holding scripts/k8s-tools.sh from the
// working directory upwards (go test runs in the package's directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "k8s-tools.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("k8stest: no scripts/k8s-tools.sh above the working directory")
		}
		dir = parent
	}
}

// RequireBin returns the directory of the built binaries, or skips the
// test (fails it under CI=true, see testutil.InCI) naming the command that
// builds them.
func RequireBin(t testing.TB) string {
	t.Helper()
	return require(t, Bin, "Kubernetes binaries", " (about 20 minutes cold)")
}

// Start brings the control plane up, or skips the test (fails it under
// CI=true, see testutil.InCI) when the binaries are not built, naming the
// command that builds them. It registers t.Cleanup that stops every process
// (SIGTERM, then SIGKILL after a few seconds) and removes the directory, and
// dumps the tail of each log when the test failed.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	bin := RequireBin(t)
	if o.Nodes <= 0 {
		o.Nodes = 2
	}
	var nodes []string
	for i := range o.Nodes {
		nodes = append(nodes, fmt.Sprintf("kwok-node-%d", i))
	}
	for name := range o.NodeLabels {
		if !slices.Contains(nodes, name) {
			t.Fatalf("k8stest: NodeLabels names %q, not one of the nodes %v", name, nodes)
		}
	}
	dir, err := os.MkdirTemp("", "cnlab-k8stest-")
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	c := &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), Nodes: nodes}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("k8stest: last lines of %s:\n%s", p.log, p.tail(25))
			}
		}
		stopping := time.Now()
		c.stop()
		t.Logf("k8stest: control plane stopped in %v", time.Since(stopping).Round(time.Millisecond))
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("k8stest: remove %s: %v", dir, err)
		}
	})
	begin := time.Now()
	if err := c.start(bin, o); err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	t.Logf("k8stest: control plane with %d nodes up in %v (%s)", len(nodes), time.Since(begin).Round(time.Millisecond), dir)
	return c
}

// stop stops every process: kwok, the scheduler and the controller-manager
// first, then the apiserver, then etcd.
func (c *Cluster) stop() {
	var first, rest []*proc
	for _, p := range c.procs {
		if p.name == "kube-apiserver" || p.name == "etcd" {
			rest = append(rest, p)
		} else {
			first = append(first, p)
		}
	}
	stopAll(first)
	for _, p := range slices.Backward(rest) {
		p.stop(5 * time.Second)
	}
}

func stopAll(ps []*proc) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { p.stop(3 * time.Second) })
	}
	wg.Wait()
}

// Client returns a clientset for the admin kubeconfig.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
	}
	return kubernetes.NewForConfig(cfg)
}

// identity is one user of the static token file.
type identity struct {
	file   string // its kubeconfig
	user   string
	groups []string
	token  string
}

func (c *Cluster) start(bin string, o Options) error {
	logs := filepath.Join(c.Dir, "logs")
	work := filepath.Join(c.Dir, "kwok")
	for _, d := range []string{logs, work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	pk, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return fmt.Errorf("keys and certificates: %w", err)
	}
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kwokPort := ports[0], ports[1], ports[2], ports[3]
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)

	// Identities: the admin of the kubeconfig handed out, the components
	// under the users the bootstrap RBAC policy binds, and kwok (which
	// plays every node) as an admin.
	ids := map[string]*identity{
		"admin":      {file: c.Kubeconfig, user: "cnlab-admin", groups: []string{"system:masters"}},
		"controller": {file: filepath.Join(c.Dir, "controller-manager.kubeconfig"), user: "system:kube-controller-manager"},
		"scheduler":  {file: filepath.Join(c.Dir, "scheduler.kubeconfig"), user: "system:kube-scheduler"},
		"kwok":       {file: filepath.Join(c.Dir, "kwok.kubeconfig"), user: "kwok", groups: []string{"system:masters"}},
	}
	var tokens strings.Builder
	for _, id := range ids {
		if id.token, err = token(); err != nil {
			return err
		}
		fmt.Fprintf(&tokens, "%s,%s,%s,%q\n", id.token, id.user, id.user, strings.Join(id.groups, ","))
		if err := writeKubeconfig(id.file, server, pk.CA, id.user, id.token); err != nil {
			return err
		}
	}
	tokenFile := filepath.Join(c.Dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens.String()), 0o600); err != nil {
		return err
	}
	kwokConfig := filepath.Join(c.Dir, "kwok.yaml")
	if err := os.WriteFile(kwokConfig, []byte(kwokStages+clusterExec), 0o600); err != nil {
		return err
	}

	env := os.Environ()
	run := func(name, dir string, env []string, args ...string) error {
		p, err := startProc(name, filepath.Join(bin, name), dir, logs, env, args...)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	// etcd
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if err := run("etcd", c.Dir, env,
		"--name=default",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, "etcd", etcdURL+"/health", nil); err != nil {
		return err
	}

	// kube-apiserver
	if err := run("kube-apiserver", c.Dir, env,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--tls-cert-file="+pk.ServerCert,
		"--tls-private-key-file="+pk.ServerKey,
		"--token-auth-file="+tokenFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-key-file="+pk.SAPub,
		"--service-account-signing-key-file="+pk.SAKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--allow-privileged=true",
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority="+pk.CA,
	); err != nil {
		return err
	}
	admin, err := c.Client()
	if err != nil {
		return err
	}
	if err := c.waitReadyz(ctx, admin); err != nil {
		return err
	}

	// The rest at once: they find the apiserver ready.
	if err := run("kube-controller-manager", c.Dir, env,
		"--kubeconfig="+ids["controller"].file,
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+pk.SAKey,
		"--root-ca-file="+pk.CA,
		"--controllers="+strings.Join([]string{
			"serviceaccount-controller",
			"serviceaccount-token-controller",
			"namespace-controller",
			"node-lifecycle-controller",
			"endpointslice-controller",
			"garbage-collector-controller",
			"root-ca-certificate-publisher-controller",
			"replicaset-controller",
			"deployment-controller",
		}, ","),
	); err != nil {
		return err
	}
	if err := run("kube-scheduler", c.Dir, env,
		"--kubeconfig="+ids["scheduler"].file,
		"--leader-elect=false",
		"--secure-port=0",
	); err != nil {
		return err
	}
	// kwok reads ~/.kwok/kwok.yaml when it exists: a HOME of its own keeps
	// a user's file out. Commands run by exec inherit this environment and
	// kwok's working directory, Dir/kwok; a TMPDIR of their own keeps what
	// they write in "the pod's /tmp" inside Dir, removed with it.
	tmp := filepath.Join(work, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	kwokEnv := append(slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, "TMPDIR=") }), "HOME="+work, "TMPDIR="+tmp)
	if err := run("kwok", work, kwokEnv,
		"--kubeconfig="+ids["kwok"].file,
		"--config="+kwokConfig,
		"--manage-all-nodes=true",
		"--cidr="+PodCIDR,
		"--node-ip=127.0.0.1",
		fmt.Sprintf("--node-port=%d", kwokPort),
		fmt.Sprintf("--server-address=127.0.0.1:%d", kwokPort),
		"--tls-cert-file="+pk.KubeletCert,
		"--tls-private-key-file="+pk.KubeletKey,
		"--node-lease-duration-seconds=40",
	); err != nil {
		return err
	}

	for _, name := range c.Nodes {
		if err := createNode(ctx, admin, name, o.NodeLabels[name]); err != nil {
			return err
		}
	}
	if err := c.waitHTTP(ctx, "kwok", fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort), nil); err != nil {
		return err
	}
	if err := c.waitNodes(ctx, admin); err != nil {
		return err
	}
	return c.waitServiceAccount(ctx, admin)
}

// clusterExec makes kwok run every exec as a local process.
const clusterExec = `
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: local
spec:
  execs:
  - local: {}
`

func writeKubeconfig(path, server, ca, user, tok string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tok}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: user}
	cfg.CurrentContext = ContextName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func createNode(ctx context.Context, cs kubernetes.Interface, name string, extra map[string]string) error {
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     runtime.GOARCH,
		"type":                   "kwok",
	}
	for k, v := range extra {
		labels[k] = v
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      labels,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
	}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return nil
}

// poll calls f every 100 ms until it returns true or an error, a process
// dies, or ctx ends; what names the wait in the error, last tells why the
// condition does not hold yet.
func (c *Cluster) poll(ctx context.Context, what string, f func() (bool, string, error)) error {
	last := ""
	for {
		for _, p := range c.procs {
			if err := p.exited(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		ok, why, err := f()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: gave up after %v: %s (logs in %s)", what, startTimeout, last, filepath.Join(c.Dir, "logs"))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) waitHTTP(ctx context.Context, what, url string, client *http.Client) error {
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	return c.poll(ctx, what, func() (bool, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "GET " + url + ": " + resp.Status, nil
	})
}

func (c *Cluster) waitReadyz(ctx context.Context, cs kubernetes.Interface) error {
	return c.poll(ctx, "kube-apiserver /readyz", func() (bool, string, error) {
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Sprintf("%v %s", err, b), nil
		}
		return true, "", nil
	})
}

func (c *Cluster) waitNodes(ctx context.Context, cs kubernetes.Interface) error {
	return c.poll(ctx, "nodes Ready and untainted", func() (bool, string, error) {
		for _, name := range c.Nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			ready := false
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready = true
				}
			}
			if !ready {
				return false, "node " + name + " not Ready", nil
			}
			if len(n.Spec.Taints) != 0 {
				return false, fmt.Sprintf("node %s has taints %v", name, n.Spec.Taints), nil
			}
		}
		return true, "", nil
	})
}

func (c *Cluster) waitServiceAccount(ctx context.Context, cs kubernetes.Interface) error {
	return c.poll(ctx, "ServiceAccount default/default", func() (bool, string, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not created yet", nil
		}
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}
