package kube

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnlab/cnlab/topology"
)

// Placements of a point (matrix placement).
const (
	SameNode  = "same-node"  // every endpoint on one node
	CrossNode = "cross-node" // the server on a second node, the rest on the first
)

// Server is the endpoint a cross-node placement puts on the second node.
const Server = topology.DefaultNamespace + "/server"

// usable reports whether a node can take the agent pods: Ready, and not
// cordoned or tainted NoSchedule/NoExecute.
func usable(n *corev1.Node) (bool, string) {
	if n.Spec.Unschedulable {
		return false, "cordoned"
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false, "tainted " + t.Key + ":" + string(t.Effect)
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			return false, "not Ready"
		}
	}
	return false, "no Ready condition"
}

// HostNodes maps the topology's hosts to nodes: --nodes first, then the
// nodes labeled cnlab.io/host=HOST, then the remaining usable nodes in
// name order (workers before control-plane nodes), one host each.
func (c *Client) HostNodes(ctx context.Context, hosts []string) (map[string]string, error) {
	l, err := c.K.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	byName := map[string]*corev1.Node{}
	for i := range l.Items {
		byName[l.Items[i].Name] = &l.Items[i]
	}
	out := map[string]string{}
	taken := map[string]bool{}
	for _, h := range hosts {
		if n, ok := c.Config.Nodes[h]; ok {
			node, found := byName[n]
			if !found {
				return nil, fmt.Errorf("--nodes %s=%s: the cluster has no node %s", h, n, n)
			}
			if ok, why := usable(node); !ok {
				return nil, fmt.Errorf("--nodes %s=%s: node %s is %s", h, n, n, why)
			}
			out[h], taken[n] = n, true
		}
	}
	for _, h := range hosts {
		if out[h] != "" {
			continue
		}
		for _, n := range l.Items {
			if n.Labels[HostLabel] == h {
				if ok, why := usable(&n); !ok {
					return nil, fmt.Errorf("node %s (labeled %s=%s) is %s", n.Name, HostLabel, h, why)
				}
				out[h], taken[n.Name] = n.Name, true
				break
			}
		}
	}
	var free []*corev1.Node
	for i := range l.Items {
		n := &l.Items[i]
		if ok, _ := usable(n); ok && !taken[n.Name] {
			free = append(free, n)
		}
	}
	sort.SliceStable(free, func(i, j int) bool {
		ci, cj := controlPlane(free[i]), controlPlane(free[j])
		if ci != cj {
			return !ci
		}
		return free[i].Name < free[j].Name
	})
	for _, h := range hosts {
		if out[h] != "" {
			continue
		}
		if len(free) == 0 {
			return nil, fmt.Errorf("no usable node left for host %s: the cluster has %d nodes (%s); map hosts with --nodes HOST=NODE or label nodes %s=HOST", h, len(l.Items), describeNodes(l.Items), HostLabel)
		}
		out[h], free = free[0].Name, free[1:]
	}
	return out, nil
}

func controlPlane(n *corev1.Node) bool {
	_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
	return cp
}

func describeNodes(ns []corev1.Node) string {
	var parts []string
	for i := range ns {
		s := ns[i].Name
		if ok, why := usable(&ns[i]); !ok {
			s += " " + why
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// EndpointNodes places every endpoint of spec: on its host's node, or as
// placement says (SameNode: all on the first host's node; CrossNode: the
// server on the second host's node, or on another usable node when the
// topology has one host, and the rest on the first).
func (c *Client) EndpointNodes(ctx context.Context, spec *topology.Spec, placement string) (map[string]string, error) {
	var hosts []string
	for _, h := range spec.Hosts {
		hosts = append(hosts, h.Name)
	}
	switch {
	case placement == SameNode && len(hosts) > 1:
		hosts = hosts[:1] // one node for all: a one-node cluster will do
	case placement == CrossNode && len(hosts) < 2:
		hosts = append(hosts, "second")
	case placement == CrossNode:
		hosts = hosts[:2]
	}
	hn, err := c.HostNodes(ctx, hosts)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, ep := range spec.Endpoints {
		switch placement {
		case SameNode:
			out[ep.ID()] = hn[hosts[0]]
		case CrossNode:
			if ep.ID() == Server {
				out[ep.ID()] = hn[hosts[1]]
			} else {
				out[ep.ID()] = hn[hosts[0]]
			}
		default:
			out[ep.ID()] = hn[ep.Host]
		}
	}
	if placement == CrossNode && hn[hosts[0]] == hn[hosts[1]] {
		return nil, fmt.Errorf("placement cross-node needs two nodes, and both hosts map to %s", hn[hosts[0]])
	}
	return out, nil
}
