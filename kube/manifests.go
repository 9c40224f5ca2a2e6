package kube

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/cnlab/cnlab/topology"
)

// agentCommand keeps an agent pod alive, doing nothing, until it is told
// to stop: the workloads are exec'd into it. A shell loop rather than
// `sleep infinity`, which busybox images lack.
var agentCommand = []string{"sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}

// ownLabels are the labels of everything a run creates.
func ownLabels(run string) map[string]string {
	return map[string]string{RunLabel: run, ManagedLabel: FieldManager}
}

// namespaceManifest is the cluster namespace standing for topology
// namespace ns, with the topology's labels (the API server adds
// kubernetes.io/metadata.name itself).
func namespaceManifest(run, name string, ns topology.Namespace) *corev1ac.NamespaceApplyConfiguration {
	labels := maps.Clone(ns.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, ownLabels(run))
	return corev1ac.Namespace(name).WithLabels(labels)
}

// Placement of a point's pods.
type Placement struct {
	// Node of each topology host.
	Nodes map[string]string
	// HostNetwork runs the agents in their node's network namespace
	// (matrix network: host).
	HostNetwork bool
}

// agentPod is an endpoint's agent pod: the endpoint's name and labels,
// on its host's node, running agentCommand in image.
func agentPod(run, ns string, ep topology.Endpoint, node, image string, hostNetwork bool) *corev1ac.PodApplyConfiguration {
	labels := maps.Clone(ep.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, ownLabels(run))
	labels[EndpointLabel] = ep.Namespace + "." + ep.Name
	c := corev1ac.Container().WithName("agent").WithImage(image).WithCommand(agentCommand...).
		WithImagePullPolicy(corev1.PullIfNotPresent)
	// In the node's network, declared ports would become host ports the
	// scheduler reserves (and refuses where they are taken): none then.
	for _, p := range map[bool][]topology.Port{false: ep.Ports}[hostNetwork] {
		cp := corev1ac.ContainerPort().WithContainerPort(int32(p.Port)).WithProtocol(corev1.Protocol(p.Protocol))
		if p.Name != "" {
			cp.WithName(p.Name)
		}
		c.WithPorts(cp)
	}
	// By the node's name (its kubernetes.io/hostname label may differ).
	onNode := corev1ac.Affinity().WithNodeAffinity(corev1ac.NodeAffinity().WithRequiredDuringSchedulingIgnoredDuringExecution(
		corev1ac.NodeSelector().WithNodeSelectorTerms(corev1ac.NodeSelectorTerm().WithMatchFields(
			corev1ac.NodeSelectorRequirement().WithKey("metadata.name").WithOperator(corev1.NodeSelectorOpIn).WithValues(node)))))
	spec := corev1ac.PodSpec().WithContainers(c).
		WithAffinity(onNode).
		WithRestartPolicy(corev1.RestartPolicyNever).
		WithTerminationGracePeriodSeconds(2).
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false)
	if hostNetwork {
		spec.WithHostNetwork(true).WithDNSPolicy(corev1.DNSClusterFirstWithHostNet)
	}
	return corev1ac.Pod(ep.Name, ns).WithLabels(labels).WithSpec(spec)
}

// owned reports whether an object's labels say this run created it.
func owned(m metav1.Object, run string) bool {
	l := m.GetLabels()
	return l[ManagedLabel] == FieldManager && (run == "" || l[RunLabel] == run)
}
