package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/topology"
)

// Backend is a run's points on a cluster: what the experiment runner
// needs of one (experiment.Cluster, wired by cmd/cnlab). It deploys one
// topology at a time; its commands run in this process through the exec
// stream.
type Backend struct {
	C   *Client
	Run string // the run's name (its lab name): namespaces cnlab-RUN-NS
	// Self is cnlab's own binary: streamed into the agent pods, and run
	// here as the reaper that stops the commands in the pods when this
	// process dies without stopping them ("" : no reaper).
	Self string
	dep  *Deployment
	reap reaper
}

// Describe detects the cluster's CNI, kube-proxy mode and nodes.
func (b *Backend) Describe(ctx context.Context) (*results.ClusterInfo, error) {
	return b.C.Detect(ctx)
}

// Deploy places spec's endpoints on nodes as placement says (SameNode,
// CrossNode) and runs them as agent pods, in the node's network with
// hostNetwork, replacing the previous deployment and its policies.
func (b *Backend) Deploy(ctx context.Context, spec *topology.Spec, placement string, hostNetwork bool, progress func(string)) error {
	b.dep = nil
	nodes, err := b.C.EndpointNodes(ctx, spec, placement)
	if err != nil {
		return err
	}
	d, err := b.C.Deploy(ctx, b.Run, spec, Placement{Nodes: nodes, HostNetwork: hostNetwork}, b.Self, progress)
	if err != nil {
		return err
	}
	b.dep = d
	return nil
}

// Endpoint is where an endpoint (by ID, ns/name) of the deployment runs:
// its pod's address and node.
func (b *Backend) Endpoint(id string) (ip netip.Addr, node string, ok bool) {
	if b.dep == nil {
		return netip.Addr{}, "", false
	}
	pod, ok := b.dep.Pods[id]
	return pod.IP, pod.Node, ok
}

// Namespaces maps the deployment's topology namespaces to the cluster's.
func (b *Backend) Namespaces() map[string]string {
	if b.dep == nil {
		return nil
	}
	return b.dep.Namespaces
}

// Agent is the path of cnlab's own binary inside the deployment's pods.
func (b *Backend) Agent() string {
	if b.dep == nil {
		return ""
	}
	return b.dep.Agent
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

// StopTimeout bounds the exec that stops a command in its pod.
const StopTimeout = 10 * time.Second

// Exec runs argv in an endpoint's pod (no TTY) in this process, streaming
// its output to stdout and stderr, and returns when it exits: nil for exit
// status 0, an *ExitError for another. The command writes its PID to a
// file in the pod first (WrapCommand), so that whatever the container
// runtime does with a closed exec stream, it is stopped there (SIGTERM,
// then SIGKILL: StopCommand, by a second exec) when ctx ends or the
// stream breaks, before Exec returns ctx's error; and, with Self, by the
// reaper when this process dies first (kill -9).
func (b *Backend) Exec(ctx context.Context, endpoint string, argv []string, stdout, stderr io.Writer) error {
	var pod Pod
	ok := false
	if b.dep != nil {
		pod, ok = b.dep.Pods[endpoint]
	}
	if !ok {
		return fmt.Errorf("endpoint %s has no pod (nothing deployed)", endpoint)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	pidfile := "cnlab-exec-" + hex.EncodeToString(r[:]) + ".pid"
	if b.Self != "" {
		if err := b.reap.add(b.Self, b.C.Config, pod.Namespace, pod.Name, pidfile); err != nil {
			return err
		}
		defer b.reap.done(pidfile)
	}
	err := b.C.Exec(ctx, pod.Namespace, pod.Name, WrapCommand(pidfile, argv), nil, stdout, stderr)
	var xe *ExitError
	if err != nil && !errors.As(err, &xe) {
		// Stopped, or the stream broke (an API server or kubelet
		// restart): the command may still run there.
		sctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		_ = b.C.Exec(sctx, pod.Namespace, pod.Name, StopCommand(pidfile), nil, nil, nil)
		cancel()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Teardown deletes the run's namespaces and waits until they are gone;
// the reaper, with no command left to stop, ends.
func (b *Backend) Teardown(ctx context.Context) error {
	_, err := b.C.Down(ctx, b.Run, true)
	b.dep = nil
	b.reap.close()
	return err
}
