package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cnlab/cnlab/internal/kpki"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/nsforward"
)

// upTimeout bounds Up from the first process to a usable cluster.
const upTimeout = 120 * time.Second

// needs are the programs Up runs, with the Debian package of each.
var needs = []struct{ bin, pkg string }{
	{"containerd", "containerd"},
	{"ctr", "containerd"},
	{"runc", "runc"},
	{"nsenter", "util-linux"},
	{"unshare", "util-linux"},
}

// cniPlugins are the CNI plugins the bridge network uses.
var cniPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

// CNIBinDir is where Debian's containernetworking-plugins puts them.
var CNIBinDir = "/usr/lib/cni"

// kubeBins are the Kubernetes binaries Up runs from Options.Tools.
var kubeBins = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}

// Prerequisites returns one error naming every missing program, plugin or
// binary (and the package or command that provides it), or nil.
func Prerequisites(o Options) error {
	var missing []string
	for _, n := range needs {
		if _, err := exec.LookPath(n.bin); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", n.bin, n.pkg))
		}
	}
	if o.Policy == "kube-router" {
		if _, err := exec.LookPath("ipset"); err != nil {
			missing = append(missing, "ipset (Debian package ipset)")
		}
	}
	for _, p := range cniPlugins {
		if _, err := os.Stat(filepath.Join(CNIBinDir, p)); err != nil {
			missing = append(missing, fmt.Sprintf("CNI plugin %s/%s (Debian package containernetworking-plugins)", CNIBinDir, p))
		}
	}
	bins := append([]string{}, kubeBins...)
	if o.Policy == "kube-router" {
		bins = append(bins, "kube-router")
	}
	if o.CNI == "cilium" {
		bins = append(bins, "kubectl")
		missing = append(missing, ciliumPrerequisites(o.Cilium)...)
	}
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(o.Tools, b)); err != nil {
			missing = append(missing, fmt.Sprintf("%s in %s (scripts/k8s-tools.sh builds it)", b, o.Tools))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("cluster up needs: %s", strings.Join(missing, "; "))
	}
	return nil
}

// Up brings cluster o.Name up and returns its record. On failure it takes
// down what it built (the logs are lost with it; the error carries the
// tail of the log that explains it).
func Up(ctx context.Context, o Options) (*Info, error) {
	if err := checkOptions(&o); err != nil {
		return nil, err
	}
	if err := Prerequisites(o); err != nil {
		return nil, err
	}
	unlock, err := lock(o.Name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if Exists(o.Name) {
		return nil, fmt.Errorf("cluster %s is already up (cnlab cluster status %s; cnlab cluster down %s)", o.Name, o.Name, o.Name)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, upTimeout)
	defer cancel()
	u := &upper{o: o, l: layout{o.Name}}
	in, err := u.up(ctx)
	if err != nil {
		why := u.explain()
		if derr := teardown(o.Name, func(string) {}); derr != nil {
			err = fmt.Errorf("%w (and taking it down: %v)", err, derr)
		}
		if why != "" {
			err = fmt.Errorf("%w\n%s", err, why)
		}
		return nil, err
	}
	in.UpSeconds = time.Since(start).Seconds()
	if err := writeInfo(in); err != nil {
		return nil, err
	}
	return in, nil
}

// upper holds the state of one Up.
type upper struct {
	o     Options
	l     layout
	ca    *kpki.CA
	procs []proc // started daemons, for the liveness checks while waiting
	pause Image
	agent Image
}

type proc struct {
	name, log string
	pid       int
}

// explain returns the last lines of the log of a daemon that died, if one
// did.
func (u *upper) explain() string {
	for _, p := range u.procs {
		if !alive(p.pid) {
			return fmt.Sprintf("%s exited; the last lines of its log:\n%s", p.name, tail(p.log, 15))
		}
	}
	return ""
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (u *upper) start(name string, node int, wrap []string, bin string, args ...string) error {
	return u.startEnv(name, node, os.Environ(), wrap, bin, args...)
}

// startEnv starts a daemon of node (0: the host's) with environment env.
func (u *upper) startEnv(name string, node int, env, wrap []string, bin string, args ...string) error {
	logPath := filepath.Join(u.l.logs(), name+".log")
	ns := ""
	if node > 0 {
		logPath = u.l.nodeLog(node, name)
		ns = netns.Path(u.l.netns(node))
	}
	pid, err := daemon(logPath, ns, env, wrap, bin, args...)
	if err != nil {
		return err
	}
	u.procs = append(u.procs, proc{name: name, log: logPath, pid: pid})
	return nil
}

func (u *upper) bin(name string) string { return filepath.Join(u.o.Tools, name) }

func (u *upper) up(ctx context.Context) (*Info, error) {
	o, l := u.o, u.l
	progress := o.Progress
	for _, d := range []string{l.dir(), l.run(), l.logs()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	in := &Info{Name: o.Name, Kubeconfig: l.kubeconfig(), CNI: o.CNI, Proxy: o.Proxy, Policy: o.Policy, Dir: l.dir(), Created: time.Now().UTC()}
	for i := 1; i <= o.Nodes; i++ {
		in.Nodes = append(in.Nodes, Node{Name: l.node(i), InternalIP: nodeIP(i), PodCIDR: podCIDR(i), Netns: l.netns(i)})
	}
	// The record goes first, so status and down know the cluster from the
	// start; down does not need it.
	if err := writeInfo(in); err != nil {
		return nil, err
	}

	progress(fmt.Sprintf("building the images (cached in %s)", ImageDir))
	var err error
	if u.pause, u.agent, err = BuildImages(ImageDir); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	in.AgentImage = u.agent.Ref

	progress(fmt.Sprintf("%d node namespaces and their wire", o.Nodes))
	if err := u.network(); err != nil {
		return nil, err
	}
	if err := u.keys(); err != nil {
		return nil, fmt.Errorf("keys and certificates: %w", err)
	}
	progress("containerd on every node, images imported")
	for i := 1; i <= o.Nodes; i++ {
		if err := u.containerd(ctx, i); err != nil {
			return nil, err
		}
	}
	progress("control plane (etcd, kube-apiserver, controller-manager, scheduler)")
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	in.Server = fmt.Sprintf("https://127.0.0.1:%d", port)
	if err := u.writeKubeconfig(l.kubeconfig(), in.Server, "admin"); err != nil {
		return nil, err
	}
	if err := writeInfo(in); err != nil {
		return nil, err
	}
	if err := u.controlPlane(port); err != nil {
		return nil, err
	}
	cs, err := client(l.kubeconfig())
	if err != nil {
		return nil, err
	}
	if err := u.poll(ctx, "kube-apiserver /readyz", func() (bool, string) {
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Sprintf("%v %s", err, b)
		}
		return true, ""
	}); err != nil {
		return nil, err
	}
	if err := u.startControllers(); err != nil {
		return nil, err
	}
	progress("kubelet on every node")
	for i := 1; i <= o.Nodes; i++ {
		if err := u.kubelet(i); err != nil {
			return nil, err
		}
	}
	if o.CNI == "cilium" {
		progress(fmt.Sprintf("the real Cilium on every node (kube-proxy replacement %v, policy %s)", o.Proxy == "cilium", o.Policy))
		if err := u.ciliumCluster(ctx, cs); err != nil {
			return nil, err
		}
		for i := 1; i <= o.Nodes; i++ {
			if err := u.ciliumAgent(i); err != nil {
				return nil, err
			}
		}
		for i := 1; i <= o.Nodes; i++ {
			if err := u.ciliumReady(ctx, i); err != nil {
				return nil, err
			}
		}
	}
	if o.Proxy != "cilium" {
		progress(fmt.Sprintf("kube-proxy (%s mode)%s on every node", o.Proxy, map[bool]string{true: " and kube-router's firewall", false: ""}[o.Policy == "kube-router"]))
		for i := 1; i <= o.Nodes; i++ {
			if err := u.nodeAgents(i); err != nil {
				return nil, err
			}
		}
	}
	if err := u.poll(ctx, "nodes Ready", func() (bool, string) {
		for _, n := range in.Nodes {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if !nodeReady(node) {
				return false, "node " + n.Name + " is not Ready"
			}
		}
		return true, ""
	}); err != nil {
		return nil, err
	}
	if u.o.Policy == "kube-router" {
		for i := 1; i <= o.Nodes; i++ {
			if err := u.kubeRouter(i); err != nil {
				return nil, err
			}
		}
	}
	if err := u.poll(ctx, "ServiceAccount default/default", func() (bool, string) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	}); err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ImageConfigMap, Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/managed-by": "cnlab"}},
		Data: map[string]string{"agentImage": u.agent.Ref, "pauseImage": u.pause.Ref, "cluster": o.Name,
			"cni": o.CNI, "proxy": o.Proxy, "policy": o.Policy},
	}
	// kube-proxy's configuration where kubeadm keeps it, so tools (and
	// the backend's Detect) read its mode as on other clusters.
	kp := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/managed-by": "cnlab"}},
		Data:       map[string]string{"config.conf": kubeProxyConfig(l, 1, o.Proxy)},
	}
	cms := []*corev1.ConfigMap{cm, kp}
	if o.Proxy == "cilium" {
		cms = cms[:1] // no kube-proxy
	}
	for _, c := range cms {
		if _, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("configmap kube-system/%s: %w", c.Name, err)
		}
	}
	for i := range in.Nodes {
		in.Nodes[i].Ready = true
	}
	return in, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// poll calls f every 100 ms until it holds, a daemon dies or ctx ends.
func (u *upper) poll(ctx context.Context, what string, f func() (bool, string)) error {
	last := ""
	for {
		for _, p := range u.procs {
			if !alive(p.pid) {
				return fmt.Errorf("waiting for %s: %s exited (log %s)", what, p.name, p.log)
			}
		}
		ok, why := f()
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: gave up: %s (logs in %s)", what, last, u.l.logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// network creates the node namespaces and the wire between them: with one
// node, a veth pair with both ends inside (eth0 carries the node's
// address, its peer is a dead end); with two, a veth pair with one end in
// each, each node routing the other's pod CIDR over it. Every node's
// default route is a dead end too (an on-link gateway nobody answers
// for): nothing leaves the machine.
func (u *upper) network() error {
	l := u.l
	for i := 1; i <= u.o.Nodes; i++ {
		if err := netns.Create(l.netns(i), nil); err != nil {
			return err
		}
	}
	h1, err := netns.Handle(l.netns(1))
	if err != nil {
		return err
	}
	defer h1.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth1"}
	if u.o.Nodes == 2 {
		veth.PeerName = "eth0"
		ns2, err := netns.Open(l.netns(2))
		if err != nil {
			return err
		}
		defer ns2.Close()
		veth.PeerNamespace = netlink.NsFd(ns2)
	}
	if err := h1.LinkAdd(veth); err != nil {
		return fmt.Errorf("node wire: %w", err)
	}
	for i := 1; i <= u.o.Nodes; i++ {
		h, err := netns.Handle(l.netns(i))
		if err != nil {
			return err
		}
		err = nodeLinks(h, i, u.o.Nodes)
		h.Close()
		if err != nil {
			return fmt.Errorf("node %d network: %w", i, err)
		}
	}
	return nil
}

func nodeLinks(h *netlink.Handle, i, nodes int) error {
	up := []string{"lo", "eth0"}
	if nodes == 1 {
		up = append(up, "eth1")
	}
	for _, n := range up {
		link, err := h.LinkByName(n)
		if err != nil {
			return fmt.Errorf("link %s: %w", n, err)
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("link %s up: %w", n, err)
		}
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	addr, _ := netlink.ParseAddr(nodeIP(i) + "/24")
	if err := h.AddrAdd(eth0, addr); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	routes := []*netlink.Route{{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP("10.243.0.254"), Flags: int(netlink.FLAG_ONLINK)}}
	for j := 1; j <= nodes; j++ {
		if j == i {
			continue
		}
		_, dst, _ := net.ParseCIDR(podCIDR(j))
		routes = append(routes, &netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: dst, Gw: net.ParseIP(nodeIP(j))})
	}
	for _, r := range routes {
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("route %s: %w", r, err)
		}
	}
	return nil
}

// keys writes the CA, the serving and client certificates and the
// kubeconfigs the components use inside the nodes.
func (u *upper) keys() error {
	c, err := kpki.NewCA(u.l.pki(), "cnlab-cluster-"+u.o.Name+"-ca")
	if err != nil {
		return err
	}
	u.ca = c
	specs := []kpki.Cert{
		{File: "apiserver", CN: "kube-apiserver", Server: true,
			IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(nodeIP(1)), net.ParseIP("10.96.0.1")},
			DNS: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{File: "admin", CN: "cnlab-admin", Orgs: []string{"system:masters"}},
		{File: "apiserver-kubelet", CN: "kube-apiserver-kubelet-client", Orgs: []string{"system:masters"}},
	}
	for i := 1; i <= u.o.Nodes; i++ {
		specs = append(specs, kpki.Cert{File: fmt.Sprintf("node%d", i), CN: "system:node:" + u.l.node(i), Orgs: []string{"system:nodes"},
			Server: true, IPs: []net.IP{net.ParseIP(nodeIP(i))}, DNS: []string{u.l.node(i)}})
	}
	for _, s := range specs {
		if err := c.Issue(s); err != nil {
			return err
		}
	}
	inner := "https://" + apiAddr()
	if err := u.writeKubeconfig(u.l.inner(), inner, "admin"); err != nil {
		return err
	}
	for i := 1; i <= u.o.Nodes; i++ {
		if err := u.writeKubeconfig(filepath.Join(u.l.pki(), fmt.Sprintf("node%d.kubeconfig", i)), inner, fmt.Sprintf("node%d", i)); err != nil {
			return err
		}
	}
	return nil
}

func (u *upper) writeKubeconfig(path, server, cert string) error {
	ctxName := "cnlab-" + u.o.Name
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ctxName] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: u.ca.Path("ca.crt")}
	cfg.AuthInfos[ctxName] = &clientcmdapi.AuthInfo{ClientCertificate: u.ca.Path(cert + ".crt"), ClientKey: u.ca.Path(cert + ".key")}
	cfg.Contexts[ctxName] = &clientcmdapi.Context{Cluster: ctxName, AuthInfo: ctxName}
	cfg.CurrentContext = ctxName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

func client(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// containerd starts node i's containerd and imports the images.
func (u *upper) containerd(ctx context.Context, i int) error {
	l := u.l
	nd, nr := l.nodeDir(i), l.nodeRun(i)
	for _, d := range []string{nd, nr, filepath.Join(nd, "net.d")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	binDir, conf, confName := CNIBinDir, cniConfig(l, i), "10-cnlab.conflist"
	if u.o.CNI == "cilium" {
		var err error
		if binDir, err = u.ciliumCNIBin(i); err != nil {
			return err
		}
		conf, confName = ciliumCNIConfig(l, i), "05-cilium.conflist"
	}
	cfg := filepath.Join(nd, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(l, i, u.pause.Ref, binDir)), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(nd, "net.d", confName), []byte(conf), 0o600); err != nil {
		return err
	}
	if err := u.start("containerd", i, nil, "containerd", "--config", cfg); err != nil {
		return err
	}
	if err := u.poll(ctx, fmt.Sprintf("node %d's containerd socket", i), func() (bool, string) {
		_, err := os.Stat(l.sock(i))
		return err == nil, "no socket yet"
	}); err != nil {
		return err
	}
	for _, im := range []Image{u.pause, u.agent} {
		out, err := exec.CommandContext(ctx, "ctr", "--address", l.sock(i), "-n", "k8s.io", "images", "import", "--no-unpack", im.Tar).CombinedOutput()
		if err != nil {
			return fmt.Errorf("node %d: import %s: %v: %s", i, im.Ref, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// controlPlane starts etcd and kube-apiserver in the first node and the
// forwarder that makes the apiserver reachable from the host.
func (u *upper) controlPlane(port int) error {
	l := u.l
	p := u.ca.Path
	if err := u.start("etcd", 1, nil, u.bin("etcd"),
		"--name=default",
		"--data-dir="+filepath.Join(l.dir(), "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380",
		"--listen-metrics-urls=",
		"--unsafe-no-fsync",
		"--log-level=warn",
	); err != nil {
		return err
	}
	if err := u.start("kube-apiserver", 1, nil, u.bin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--advertise-address="+nodeIP(1),
		"--tls-cert-file="+p("apiserver.crt"),
		"--tls-private-key-file="+p("apiserver.key"),
		"--client-ca-file="+p("ca.crt"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-key-file="+p("sa.pub"),
		"--service-account-signing-key-file="+p("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--allow-privileged=true",
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate="+p("apiserver-kubelet.crt"),
		"--kubelet-client-key="+p("apiserver-kubelet.key"),
		"--kubelet-certificate-authority="+p("ca.crt"),
	); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	env := nsforward.Environ(u.o.Name, fmt.Sprintf("127.0.0.1:%d", port), l.netns(1), apiAddr())
	pid, err := daemon(filepath.Join(l.logs(), "forwarder.log"), "", env, nil, self)
	if err != nil {
		return err
	}
	u.procs = append(u.procs, proc{name: "forwarder", log: filepath.Join(l.logs(), "forwarder.log"), pid: pid})
	return nil
}

func (u *upper) startControllers() error {
	inner := u.l.inner()
	p := u.ca.Path
	if err := u.start("kube-controller-manager", 1, nil, u.bin("kube-controller-manager"),
		"--kubeconfig="+inner,
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+p("sa.key"),
		"--root-ca-file="+p("ca.crt"),
		"--controllers="+strings.Join([]string{
			"serviceaccount-controller", "serviceaccount-token-controller", "namespace-controller",
			"node-lifecycle-controller", "endpointslice-controller", "endpointslice-mirroring-controller",
			"garbage-collector-controller", "root-ca-certificate-publisher-controller",
			"replicaset-controller", "deployment-controller", "daemonset-controller",
		}, ","),
	); err != nil {
		return err
	}
	return u.start("kube-scheduler", 1, nil, u.bin("kube-scheduler"),
		"--kubeconfig="+inner, "--leader-elect=false", "--secure-port=0")
}

// kubeletSysctls are what kubelet sets on the host unless told to fail
// instead (protectKernelDefaults): it runs with files mounted over them.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// kubelet starts node i's kubelet: in the node's network namespace, and in
// a mount namespace of its own where kubeletSysctls are plain files. Its
// root directory is made a shared mount first, so the volumes it mounts
// there reach containerd in the host's mount namespace.
func (u *upper) kubelet(i int) error {
	l := u.l
	nd := l.nodeDir(i)
	root := filepath.Join(nd, "kubelet")
	sys := filepath.Join(nd, "sysctl")
	plugins := filepath.Join(nd, "device-plugins")
	for _, d := range []string{root, sys, plugins, filepath.Join(nd, "pod-logs"), filepath.Join(nd, "volume-plugins")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := makeShared(root); err != nil {
		return err
	}
	if err := makeCgroup(l.cgroup(i)); err != nil {
		return err
	}
	var script strings.Builder
	script.WriteString("set -e; mount --make-rprivate /proc; ")
	// kubelet's device-plugin directory is a fixed path: the nodes'
	// kubelets, started at once, each empty it and listen on
	// kubelet.sock there, and one lost the race ("bind: address already
	// in use"). Each gets the node's own, mounted over it in this mount
	// namespace (its root made private first, so the mount stays here
	// where the host's root is shared; the kubelet root below is a mount
	// of its own and stays shared).
	fmt.Fprintf(&script, "mount --make-private /; mkdir -p %s; mount --bind %s %s; ", devicePlugins, plugins, devicePlugins)
	for k, v := range kubeletSysctls {
		f := filepath.Join(sys, strings.ReplaceAll(k, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&script, "mount --bind %s /proc/sys/%s; ", f, k)
	}
	script.WriteString(`exec "$@"`)
	cfg := filepath.Join(nd, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig(l, i, u.ca.Path)), 0o600); err != nil {
		return err
	}
	return u.start("kubelet", i, []string{"unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", script.String(), "kubelet"},
		u.bin("kubelet"),
		"--config="+cfg,
		"--kubeconfig="+filepath.Join(l.pki(), fmt.Sprintf("node%d.kubeconfig", i)),
		"--root-dir="+root,
		"--hostname-override="+l.node(i),
		"--node-ip="+nodeIP(i),
		"--v=1",
	)
}

// makeShared bind-mounts dir onto itself and makes it a shared mount (as
// internal/netns does for /run/netns).
func makeShared(dir string) error {
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// nodeAgents starts node i's kube-proxy.
func (u *upper) nodeAgents(i int) error {
	l := u.l
	cfg := filepath.Join(l.nodeDir(i), "kube-proxy.yaml")
	if err := os.WriteFile(cfg, []byte(kubeProxyConfig(l, i, u.o.Proxy)), 0o600); err != nil {
		return err
	}
	return u.start("kube-proxy", i, nil, u.bin("kube-proxy"), "--config="+cfg)
}

// kubeRouter starts node i's kube-router firewall; it needs its Node
// registered.
func (u *upper) kubeRouter(i int) error {
	l := u.l
	return u.start("kube-router", i, nil, u.bin("kube-router"),
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--enable-cni=false", "--enable-ipv6=false",
		"--kubeconfig="+l.inner(),
		"--hostname-override="+l.node(i),
		"--service-cluster-ip-range="+ServiceCIDR,
		"--health-port=0",
		"--metrics-port=0",
	)
}
