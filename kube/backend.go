package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"

	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/topology"
)

// Backend is the experiment runner's kubernetes backend: a run's points on
// a cluster (experiment.Backend).
type Backend struct {
	C   *Client
	Run string // the run's name (its lab name): namespaces cnlab-RUN-NS
	// Self is cnlab's own binary: streamed into the agent pods, and run
	// here as the relay of every command (cnlab agent exec).
	Self string
	dep  *Deployment
}

var _ experiment.Backend = (*Backend)(nil)

// Name is experiment.BackendKubernetes.
func (b *Backend) Name() string { return experiment.BackendKubernetes }

// Describe detects the cluster's CNI, kube-proxy mode and nodes.
func (b *Backend) Describe(ctx context.Context) (*experiment.ClusterInfo, error) {
	return b.C.Detect(ctx)
}

// Deploy places spec's endpoints on nodes as p says and runs them as
// agent pods.
func (b *Backend) Deploy(ctx context.Context, spec *topology.Spec, p experiment.Params, progress func(string)) (*experiment.Deployed, error) {
	placement := ""
	switch p.Placement {
	case experiment.PlacementSameNode:
		placement = SameNode
	case experiment.PlacementCrossNode:
		placement = CrossNode
	}
	nodes, err := b.C.EndpointNodes(ctx, spec, placement)
	if err != nil {
		return nil, err
	}
	d, err := b.C.Deploy(ctx, b.Run, spec, Placement{Nodes: nodes, HostNetwork: p.Network == experiment.NetworkHost}, b.Self, progress)
	if err != nil {
		return nil, err
	}
	b.dep = d
	out := &experiment.Deployed{Endpoints: map[string]experiment.DeployedEndpoint{}, Namespaces: d.Namespaces, Agent: d.Agent}
	for id, pod := range d.Pods {
		out.Endpoints[id] = experiment.DeployedEndpoint{IP: pod.IP, Node: pod.Node, Pod: pod.Namespace + "/" + pod.Name}
	}
	return out, nil
}

// ApplyPolicies rewrites text for the run's namespaces and applies it.
func (b *Backend) ApplyPolicies(ctx context.Context, text string) error {
	if b.dep == nil {
		return errors.New("no deployment to apply policies to")
	}
	objs, err := RewritePolicies([]byte(text), "generated policies", b.dep.Namespaces, b.Run)
	if err != nil {
		return err
	}
	return b.C.ApplyPolicies(ctx, b.Run, sortedNamespaces(b.dep.Namespaces), objs)
}

// ApplyServices rewrites text (Services and EndpointSlices) for the run's
// namespaces, applies it, and returns the cluster IP of measured (a
// topology namespace/name; "" for none).
func (b *Backend) ApplyServices(ctx context.Context, text, measured string) (netip.Addr, error) {
	if b.dep == nil {
		return netip.Addr{}, errors.New("no deployment to install Services in")
	}
	objs, err := RewriteServices([]byte(text), "generated Services", b.dep.Namespaces, b.Run)
	if err != nil {
		return netip.Addr{}, err
	}
	vips, err := b.C.ApplyServices(ctx, b.Run, sortedNamespaces(b.dep.Namespaces), objs)
	if err != nil || measured == "" {
		return netip.Addr{}, err
	}
	ns, name, _ := strings.Cut(measured, "/")
	vip, ok := vips[b.dep.Namespaces[ns]+"/"+name]
	if !ok {
		return netip.Addr{}, fmt.Errorf("Service %s got no cluster IP", measured)
	}
	return vip, nil
}

// Command is `cnlab agent exec` relaying argv into the endpoint's pod.
func (b *Backend) Command(ctx context.Context, endpoint string, argv []string) *exec.Cmd {
	var pod Pod
	ok := false
	if b.dep != nil {
		pod, ok = b.dep.Pods[endpoint]
	}
	if !ok {
		cmd := exec.CommandContext(ctx, b.Self)
		cmd.Err = fmt.Errorf("endpoint %s has no pod (nothing deployed)", endpoint)
		return cmd
	}
	args := RelayArgs(b.C.Config, pod.Namespace, pod.Name, argv)
	cmd := exec.CommandContext(ctx, b.Self, args...)
	// A run killed with -9 cannot stop its relays: the kernel tells them
	// (SIGTERM), and each stops its command in the pod.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	return cmd
}

// RelayArgs are the arguments of `cnlab agent exec` running argv in a pod.
func RelayArgs(c Config, ns, pod string, argv []string) []string {
	args := []string{"agent", "exec", "--namespace", ns, "--pod", pod}
	if c.Kubeconfig != "" {
		args = append(args, "--kubeconfig", c.Kubeconfig)
	}
	if c.Context != "" {
		args = append(args, "--context", c.Context)
	}
	return append(append(args, "--"), argv...)
}

// Teardown deletes the run's namespaces and waits until they are gone.
func (b *Backend) Teardown(ctx context.Context) error {
	_, err := b.C.Down(ctx, b.Run, true)
	b.dep = nil
	return err
}
