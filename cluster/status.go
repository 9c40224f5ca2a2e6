package cluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Status returns cluster name's record with each node's Ready as the
// apiserver says now. A cluster whose apiserver does not answer keeps
// every node not Ready and says why in the error, with the record.
func Status(ctx context.Context, name string) (*Info, error) {
	in, err := ReadInfo(name)
	if err != nil {
		return nil, err
	}
	for i := range in.Nodes {
		in.Nodes[i].Ready = false
	}
	cs, err := client(in.Kubeconfig)
	if err != nil {
		return in, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("cluster %s: the apiserver does not answer: %w", name, err)
	}
	for _, n := range nodes.Items {
		for i := range in.Nodes {
			if in.Nodes[i].Name == n.Name {
				in.Nodes[i].Ready = nodeReady(&n)
			}
		}
	}
	return in, nil
}
