package kube

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	vns "github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnlab/cnlab/cluster"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/internal/svcscenarios"
	"github.com/cnlab/cnlab/policy"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/service"
	"github.com/cnlab/cnlab/topology"
)

// clusterDifference is a place where the real kube-proxy (or
// kube-router, the cluster's policy engine) reaches other backends than
// cnlab's model (and so cnlab's proxies, which lab.TestServiceScenarios
// holds to it) says. docs/services.md ("Fidelity to the real kube-proxy
// (checked)") lists them.
type clusterDifference struct {
	Name, Why string
	Mode      string // kube-proxy's mode it shows in; "" for both
	// Real is what the cluster reaches in the cell where the model (or a
	// difference before this one) says want; want itself where the
	// difference does not apply.
	Real func(c diffCell, want []string) []string
}

// diffCell is one client's connections to one frontend target.
type diffCell struct {
	mode     string // kube-proxy's
	client   *topology.Endpoint
	host     string // "" for the cluster IP; else the node port on this host
	f        *service.Frontend
	m        *service.Model
	policies bool // the scenario has policies
}

// clusterDifferences are every difference the scenarios show. A cell
// whose backends are neither the model's nor, where these apply, theirs
// fails the test; so does a difference here that no cell shows any more
// (the list must stay true).
var clusterDifferences = []clusterDifference{
	{Name: "pod to a node port under externalTrafficPolicy Local",
		Why: "kube-proxy sends a pod's connection (source in --cluster-cidr) to a Local node port to the cluster-wide service chain, unmasqueraded (iptables: KUBE-EXT- jumps -s 10.244.0.0/16 to KUBE-SVC-; nftables: the external- chain to service-): through its own node's address a pod reaches every endpoint; through another node's, every endpoint but those on its own node, whose replies go straight back to it past the node that translated (and the client itself only in iptables mode, whose endpoint chain masquerades a hairpin wherever the endpoint is). cnlab's proxies send it, as an outside client's, to the node's own endpoints only",
		Real: func(c diffCell, want []string) []string {
			if c.host == "" || !c.f.ExternalLocal {
				return want
			}
			var out []string
			for _, id := range backendEndpoints(c.f) {
				ep, _ := c.m.Lab.Endpoint(id)
				if c.host == c.client.Host || ep.Host != c.client.Host || (id == c.client.ID() && c.mode == "iptables") {
					out = append(out, id)
				}
			}
			return out
		}},
	{Name: "hairpin past an isolating policy",
		Why: "kube-router accepts every connection to a pod from its own node's addresses, and a hairpin through a cluster IP reaches the backend masqueraded to its node's address: a backend isolated by policy still reaches itself through the Service; cnlab's model and its policy datapaths judge the hairpin as traffic from the host, which the policy does not allow",
		Real: func(c diffCell, want []string) []string {
			id := c.client.ID()
			if !c.policies || c.host != "" || !slices.Contains(backendEndpoints(c.f), id) || slices.Contains(want, id) {
				return want
			}
			return slices.Sorted(slices.Values(append(slices.Clone(want), id)))
		}},
	{Name: "nftables hairpin to an endpoint without nodeName", Mode: "nftables",
		Why: "kube-proxy's nftables mode masquerades a hairpin by the set hairpin-connections, which holds only the endpoints whose EndpointSlice nodeName is its node: a backend written in a slice without nodeName does not reach itself through the Service (no masquerade, so its reply to itself is not translated back); its iptables mode masquerades in every endpoint chain, as cnlab's proxies do in both modes",
		Real: func(c diffCell, want []string) []string {
			id := c.client.ID()
			if c.host != "" || !slices.Contains(want, id) || sliceNodeName(c.m, c.f, c.client.IP) != "" {
				return want
			}
			return slices.DeleteFunc(slices.Clone(want), func(s string) bool { return s == id })
		}},
}

// sliceNodeName is the nodeName of address ip in the EndpointSlices of
// f's Service ("" for none).
func sliceNodeName(m *service.Model, f *service.Frontend, ip netip.Addr) string {
	for _, sl := range m.Resolved.Slices {
		if sl.Namespace+"/"+sl.Service != f.Service {
			continue
		}
		for _, e := range sl.Endpoints {
			if e.Address == ip {
				return e.NodeName
			}
		}
	}
	return ""
}

// notOnCluster names the scenarios that cannot run on the local cluster,
// and why; every other scenario runs.
var notOnCluster = map[string]string{}

// scenarioPod is an endpoint's agent pod on the local cluster: its
// network namespace, which the test enters to listen and connect exactly
// as a process in the pod does (same kernel, same namespace).
type scenarioPod struct {
	id   string
	ip   netip.Addr
	node string
	ns   vns.NsHandle
}

// TestServiceScenariosOnLocalCluster runs the service scenario table
// (svcscenarios.Scenarios, the one lab.TestServiceScenarios runs on cnlab's
// proxies) on a real two-node cluster, once with kube-proxy in iptables
// mode and once in nftables mode, kube-router enforcing the policies: the
// lab's endpoints are agent pods (same names, labels, namespaces' labels,
// and hosts as nodes), each scenario's Services and policies are applied
// through the kubernetes backend (the addresses of written EndpointSlices
// become the pods'), and from every pod to each frontend (the cluster IP,
// and the node port on each node's address where the scenario says) the
// set of backends that answered (each answers with its name) must be the
// model's for the lab, but for clusterDifferences.
func TestServiceScenariosOnLocalCluster(t *testing.T) {
	for _, mode := range []string{"iptables", "nftables"} {
		t.Run(mode, func(t *testing.T) { serviceScenariosOnCluster(t, mode) })
	}
}

func serviceScenariosOnCluster(t *testing.T, mode string) {
	begin := time.Now()
	in := localCluster(t, cluster.Options{Name: "t-svs-" + mode[:3], Nodes: 2, Proxy: mode, Policy: "kube-router"})
	ctx := context.Background()
	spec, err := topology.Parse([]byte(fmt.Sprintf(svcscenarios.Lab, "svs", "wire")), "service lab", topology.Overrides{Datapath: mode, Proxy: mode})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Connect(Config{Kubeconfig: in.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	waitNodesUsable(t, cl)
	b := &Backend{C: cl, Run: "svs"}
	if err := b.Deploy(ctx, spec, "", false, func(s string) { t.Log(s) }); err != nil {
		t.Fatal(err)
	}
	nodeOf := map[string]cluster.Node{} // host -> node, in order
	for i, h := range spec.Hosts {
		nodeOf[h.Name] = in.Nodes[i]
	}
	pods := scenarioPods(t, in, b, spec, nodeOf)
	t.Logf("%d pods running, %v after the cluster's start", len(pods), time.Since(begin).Round(time.Millisecond))

	seen := map[string]int{} // difference name -> cells it showed in
	for _, sc := range svcscenarios.Scenarios {
		if why, ok := notOnCluster[sc.Name]; ok {
			t.Logf("%s: not run on the cluster: %s", sc.Name, why)
			continue
		}
		svcs, sls, err := service.Parse([]byte(sc.Services), sc.Name)
		if err != nil {
			t.Fatal(err)
		}
		var pols []*policy.Policy
		if sc.Policies != "" {
			if pols, err = policy.Parse([]byte(sc.Policies), sc.Name); err != nil {
				t.Fatal(err)
			}
		}
		r, err := service.Resolve(spec, svcs, sls, nil)
		if err != nil {
			t.Fatal(err)
		}
		pm, err := policy.NewModel(spec, pols)
		if err != nil {
			t.Fatal(err)
		}
		m := &service.Model{Lab: spec, Resolved: r, Policy: pm}
		if msg := sc.Want(m); msg != "" {
			t.Errorf("%s: %s", sc.Name, msg)
		}
		applied := time.Now()
		if _, err := b.ApplyServices(ctx, clusterText(sc.Services, spec, pods, nodeOf), ""); err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		if err := b.ApplyPolicies(ctx, sc.Policies); err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		waitProgrammed(t, b, in, m, pods, applied)
		for _, ref := range sc.Probe {
			f, err := m.Resolved.Frontend(ref)
			if err != nil {
				t.Fatal(err)
			}
			seen0 := maps.Clone(seen)
			probeOnCluster(t, ctx, mode, sc, b, m, f, pods, nodeOf, seen)
			for k, n := range seen {
				if n > seen0[k] {
					t.Logf("%s: %s: %s, as listed", sc.Name, ref, k)
				}
			}
		}
		t.Logf("%s: %v", sc.Name, time.Since(applied).Round(time.Millisecond))
	}
	for _, d := range clusterDifferences {
		if seen[d.Name] == 0 && (d.Mode == "" || d.Mode == mode) {
			t.Errorf("known difference %q: no cell showed it: the cluster now agrees with the model there; remove it from clusterDifferences and docs/services.md", d.Name)
		}
	}
	t.Logf("kube-proxy %s: %d scenarios in %v (cluster up included)", mode, len(svcscenarios.Scenarios), time.Since(begin).Round(time.Millisecond))
}

// waitNodesUsable waits until every node can take the pods: cluster up
// returns once the nodes are Ready, and the node lifecycle controller
// lifts a node's not-ready taint a moment later (seen once in six runs).
func waitNodesUsable(t *testing.T, cl *Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := cl.K.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		why := ""
		for i := range l.Items {
			if ok, w := usable(&l.Items[i]); !ok {
				why = l.Items[i].Name + " is " + w
			}
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after cluster up, %s", why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scenarioPods finds each endpoint's pod, checks it runs on its host's
// node, and opens its network namespace (found among the cluster's by the
// pod's address).
func scenarioPods(t *testing.T, in *cluster.Info, b *Backend, spec *topology.Spec, nodeOf map[string]cluster.Node) map[string]*scenarioPod {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.RunRoot, in.Name, "node*", "containerd", "io.containerd.grpc.v1.cri", "netns", "*"))
	if err != nil {
		t.Fatal(err)
	}
	byIP := map[netip.Addr]vns.NsHandle{}
	for _, f := range files {
		h, err := vns.GetFromPath(f)
		if err != nil {
			t.Fatal(err)
		}
		var addrs []net.Addr
		if err := netns.DoHandle(h, func() (err error) { addrs, err = net.InterfaceAddrs(); return }); err != nil {
			t.Fatal(err)
		}
		kept := false
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() {
				byIP[p.Addr().Unmap()], kept = h, true
			}
		}
		if !kept {
			h.Close()
		}
	}
	t.Cleanup(func() {
		for _, h := range byIP {
			h.Close()
		}
	})
	pods := map[string]*scenarioPod{}
	for _, ep := range spec.Endpoints {
		ip, node, ok := b.Endpoint(ep.ID())
		if !ok {
			t.Fatalf("endpoint %s has no pod", ep.ID())
		}
		if want := nodeOf[ep.Host].Name; node != want {
			t.Fatalf("endpoint %s (host %s) runs on node %s, want %s", ep.ID(), ep.Host, node, want)
		}
		h, ok := byIP[ip]
		if !ok {
			t.Fatalf("endpoint %s: no network namespace of cluster %s has its pod's address %s", ep.ID(), in.Name, ip)
		}
		pods[ep.ID()] = &scenarioPod{id: ep.ID(), ip: ip, node: node, ns: h}
	}
	return pods
}

var nodeNameField = regexp.MustCompile(`nodeName: ([a-z0-9-]+)`)

// clusterText is a scenario's Services for the cluster: the lab addresses
// its EndpointSlices name become the pods' addresses, its hosts the
// nodes.
func clusterText(text string, spec *topology.Spec, pods map[string]*scenarioPod, nodeOf map[string]cluster.Node) string {
	for _, ep := range spec.Endpoints {
		re := regexp.MustCompile(`\b` + regexp.QuoteMeta(ep.IP.String()) + `\b`)
		text = re.ReplaceAllString(text, pods[ep.ID()].ip.String())
	}
	return nodeNameField.ReplaceAllStringFunc(text, func(s string) string {
		host := strings.TrimPrefix(s, "nodeName: ")
		if n, ok := nodeOf[host]; ok {
			return "nodeName: " + n.Name
		}
		return s
	})
}

// waitProgrammed waits until the cluster's EndpointSlices hold every pod
// the model's frontends send to, and then until each node's kube-proxy has
// synced its rules since the apply with no change pending (its metrics).
// What kube-router enforces, and when, the probe's retries absorb.
func waitProgrammed(t *testing.T, b *Backend, in *cluster.Info, m *service.Model, pods map[string]*scenarioPod, applied time.Time) {
	t.Helper()
	ctx := context.Background()
	ns := b.Namespaces()["x"]
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := ""
		for i := range m.Resolved.Table.Frontends {
			f := &m.Resolved.Table.Frontends[i]
			_, name, _ := strings.Cut(f.Service, "/")
			l, err := b.C.K.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + name})
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, s := range l.Items {
				for _, e := range s.Endpoints {
					for _, a := range e.Addresses {
						have[a] = true
					}
				}
			}
			for _, id := range backendEndpoints(f) {
				if !have[pods[id].ip.String()] {
					missing = fmt.Sprintf("%s's EndpointSlices lack %s (%s)", f.Service, id, pods[id].ip)
				}
			}
		}
		synced := ""
		if missing == "" {
			for _, n := range in.Nodes {
				if s := kubeProxySynced(n.Netns, applied); s != "" {
					synced = n.Name + ": " + s
				}
			}
		}
		if missing == "" && synced == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not programmed 30 s after the apply: %s%s", missing, synced)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kubeProxySynced reads a node's kube-proxy metrics (127.0.0.1:10249 in
// the node's namespace): "" when its last sync ended after since and no
// change waits for the next one, else what is not so.
func kubeProxySynced(nodeNetns string, since time.Time) string {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = netns.Do(nodeNetns, func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
	resp, err := c.Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	val := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		name, labels, _ := strings.Cut(f[0], "{")
		if strings.Contains(labels, "ip_family=") && !strings.Contains(labels, `ip_family="IPv4"`) {
			continue // the IPv6 proxier's, idle here
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			val[name] = v
		}
	}
	last, ok := val["kubeproxy_sync_proxy_rules_last_timestamp_seconds"]
	switch {
	case !ok:
		return "no kubeproxy_sync_proxy_rules_last_timestamp_seconds in kube-proxy's metrics"
	case last < float64(since.UnixNano())/1e9:
		return fmt.Sprintf("kube-proxy's last sync ended at %.3f, before the apply (%.3f); queued %.3f", last, float64(since.UnixNano())/1e9, val["kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"])
	case val["kubeproxy_sync_proxy_rules_endpoint_changes_pending"] > 0 || val["kubeproxy_sync_proxy_rules_service_changes_pending"] > 0:
		return "kube-proxy has changes pending"
	}
	return ""
}

// backendEndpoints are the endpoints a frontend's backends are, sorted.
func backendEndpoints(f *service.Frontend) []string {
	var out []string
	for _, b := range f.Backends {
		if b.Endpoint != "" && !slices.Contains(out, b.Endpoint) {
			out = append(out, b.Endpoint)
		}
	}
	slices.Sort(out)
	return out
}

// probeCell is one (client, target) of a frontend: the model's set, what
// the real kube-proxy must reach (the model's unless a listed difference
// says), and what it did.
type probeCell struct {
	from, target string
	model, want  []string
	differences  []string // the listed ones that make want
	got          []string
	dst          netip.AddrPort
}

// probeOnCluster probes frontend f of the scenario from every pod, on its
// cluster IP and its node port on each node of the scenario, retrying for
// up to 20 s until every cell is as wanted (kube-router applies policies
// a moment after the API has them), and reports the cells that are not.
func probeOnCluster(t *testing.T, ctx context.Context, mode string, sc svcscenarios.Scenario, b *Backend, m *service.Model, f *service.Frontend, pods map[string]*scenarioPod, nodeOf map[string]cluster.Node, seen map[string]int) {
	t.Helper()
	ns, name, _ := strings.Cut(f.Service, "/")
	svc, err := b.C.K.CoreV1().Services(b.Namespaces()[ns]).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var vip netip.AddrPort
	var nodePort uint16
	for _, p := range svc.Spec.Ports {
		if p.Name == f.PortName || len(svc.Spec.Ports) == 1 {
			vip = netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), uint16(p.Port))
			nodePort = uint16(p.NodePort)
		}
	}
	var cells []*probeCell
	for _, ep := range m.Lab.Endpoints {
		targets := append([]string{""}, sc.Nodes...)
		for _, host := range targets {
			c := &probeCell{from: ep.ID(), target: "cluster IP", dst: vip}
			e := m.Expect(&ep, f)
			if host != "" {
				if e, err = m.ExpectNodePort(&ep, f, host); err != nil {
					t.Fatal(err)
				}
				c.target = "node port on " + host
				c.dst = netip.AddrPortFrom(netip.MustParseAddr(nodeOf[host].InternalIP), nodePort)
			}
			c.model, c.want = e.Expected, e.Expected
			for _, d := range clusterDifferences {
				if d.Mode != "" && d.Mode != mode {
					continue
				}
				next := d.Real(diffCell{mode: mode, client: &ep, host: host, f: f, m: m, policies: sc.Policies != ""}, c.want)
				if !slices.Equal(next, c.want) {
					c.want, c.differences = next, append(c.differences, d.Name)
				}
			}
			cells = append(cells, c)
		}
	}
	stop, err := serveEndpoints(pods, f)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// Enough connections to reach each of the frontend's backends
	// (whatever subset a client may reach) but with odds below 10⁻⁶.
	k := probe.DefaultConnections(len(backendEndpoints(f)))
	deadline := time.Now().Add(20 * time.Second)
	for {
		var wg sync.WaitGroup
		for _, c := range cells {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.got = reached(ctx, pods[c.from], f.Protocol, c.dst, k, f.Affinity > 0)
			}()
		}
		wg.Wait()
		bad := 0
		for _, c := range cells {
			if !sameReach(c.got, c.want, f.Affinity > 0) {
				bad++
			}
		}
		if bad == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, c := range cells {
		ok := sameReach(c.got, c.want, f.Affinity > 0)
		switch {
		case ok:
			for _, d := range c.differences {
				seen[d]++
			}
		case len(c.differences) > 0 && sameReach(c.got, c.model, f.Affinity > 0):
			t.Errorf("%s: %s (%s) from %s: the real kube-proxy reached %v, the model's set; the listed differences %q say %v: are they gone?", sc.Name, f.Key(), c.target, c.from, c.got, c.differences, c.want)
		case !ok:
			t.Errorf("%s: %s (%s, %s) from %s: the real kube-proxy reached %v, the model says %v (a difference not in clusterDifferences)", sc.Name, f.Key(), c.target, c.dst, c.from, c.got, c.model)
		}
	}
}

// sameReach: the reached set is the wanted one; under ClientIP affinity,
// one backend of it (none when none is wanted).
func sameReach(got, want []string, affinity bool) bool {
	if affinity && len(want) > 0 {
		return len(got) == 1 && slices.Contains(want, got[0])
	}
	return slices.Equal(got, want)
}

// serveEndpoints makes every pod a backend of f is listen on its target
// port and answer each connection (or datagram) with its endpoint's name.
func serveEndpoints(pods map[string]*scenarioPod, f *service.Frontend) (stop func(), err error) {
	var closers []func()
	var wg sync.WaitGroup
	stop = func() {
		for _, c := range closers {
			c()
		}
		wg.Wait()
	}
	done := map[netip.AddrPort]bool{}
	for _, be := range f.Backends {
		p := pods[be.Endpoint]
		if p == nil || done[be.AddrPort()] {
			continue
		}
		done[be.AddrPort()] = true
		addr := fmt.Sprintf(":%d", be.Port)
		answer := []byte(p.id + "\n")
		if f.Protocol == "tcp" {
			var ln net.Listener
			if err := netns.DoHandle(p.ns, func() (err error) { ln, err = net.Listen("tcp4", addr); return }); err != nil {
				stop()
				return nil, fmt.Errorf("listen on tcp %s in %s: %w", addr, p.id, err)
			}
			closers = append(closers, func() { ln.Close() })
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					_, _ = c.Write(answer)
					c.Close()
				}
			}()
			continue
		}
		var pc net.PacketConn
		if err := netns.DoHandle(p.ns, func() (err error) { pc, err = net.ListenPacket("udp4", addr); return }); err != nil {
			stop()
			return nil, fmt.Errorf("listen on udp %s in %s: %w", addr, p.id, err)
		}
		closers = append(closers, func() { pc.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 512)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(answer, from)
			}
		}()
	}
	return stop, nil
}

// reached opens k fresh connections (UDP sockets) from the pod to dst, 16
// at a time (with affinity the first alone, as a proxy records the
// client's pick only once it made it), and returns the endpoints that
// answered, sorted.
func reached(ctx context.Context, p *scenarioPod, proto string, dst netip.AddrPort, k int, affinity bool) []string {
	var mu sync.Mutex
	got := map[string]bool{}
	one := func() {
		id := ask(ctx, p, proto, dst, 300*time.Millisecond)
		if id != "" {
			mu.Lock()
			got[id] = true
			mu.Unlock()
		}
	}
	if affinity {
		one()
		k--
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for range k {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			one()
		}()
	}
	wg.Wait()
	return slices.Sorted(maps.Keys(got))
}

// ask makes one connection (or sends one datagram, with a retry) from
// inside the pod to dst and returns the name it answered with ("" for no
// answer).
func ask(ctx context.Context, p *scenarioPod, proto string, dst netip.AddrPort, timeout time.Duration) string {
	if proto == "tcp" {
		var c net.Conn
		if err := netns.DoHandle(p.ns, func() (err error) {
			c, err = (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp4", dst.String())
			return err
		}); err != nil {
			return ""
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line)
	}
	// Connected, as a client's socket usually is: a reply from another
	// address than dst (a backend answering past the translation) is not
	// an answer.
	var c net.Conn
	if err := netns.DoHandle(p.ns, func() (err error) { c, err = net.Dial("udp4", dst.String()); return }); err != nil {
		return ""
	}
	defer c.Close()
	buf := make([]byte, 512)
	for range 2 {
		if _, err := c.Write([]byte("who\n")); err != nil {
			return ""
		}
		_ = c.SetReadDeadline(time.Now().Add(timeout / 2))
		if n, err := c.Read(buf); err == nil {
			return strings.TrimSpace(string(buf[:n]))
		}
	}
	return ""
}
