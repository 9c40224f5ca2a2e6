package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cnlab/cnlab/internal/input"
)

// runName is what a run's name may be: it is the middle of its namespaces'
// names and a label value.
var runName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// CheckRun refuses a run name that cannot name namespaces (flag names the
// flag or argument it came from).
func CheckRun(flag, run string) error {
	if !runName.MatchString(run) || len(run) > 40 {
		return &input.Error{File: flag, Msg: fmt.Sprintf("%q: a run name on a cluster is lowercase letters, digits and '-', starting and ending with a letter or digit, at most 40 characters (it names namespaces cnlab-RUN-NS)", run)}
	}
	return nil
}

// imageRef is a container image reference: an optional registry host
// (with a port), a lowercase path, an optional tag and digest.
var imageRef = regexp.MustCompile(`^` +
	`(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`)

// CheckImage refuses what is not an image reference.
func CheckImage(img string) error {
	if len(img) > 512 || !imageRef.MatchString(img) {
		return &input.Error{File: "--image", Msg: fmt.Sprintf("%q is not an image reference (e.g. docker.io/nicolaka/netshoot:v0.13)", img)}
	}
	return nil
}

// kubeconfigError says which kubeconfig could not be used, as bad input.
func kubeconfigError(c Config, err error) error {
	flag, where := "--kubeconfig", c.Kubeconfig
	if where == "" {
		if env := os.Getenv("KUBECONFIG"); env != "" {
			flag, where = "$KUBECONFIG", env
		} else {
			flag, where = "kubeconfig", clientcmd.RecommendedHomeFile
		}
	}
	msg := err.Error()
	switch {
	case clientcmd.IsEmptyConfig(err) && noneExists(where):
		msg = fmt.Sprintf("no cluster to run on: %s does not exist (give --kubeconfig FILE, or set $KUBECONFIG to one; cnlab cluster up makes a local cluster and prints its kubeconfig)", where)
	case clientcmd.IsEmptyConfig(err):
		msg = fmt.Sprintf("no cluster to run on: %s has no usable configuration (give --kubeconfig FILE, or set $KUBECONFIG)", where)
	case c.Context != "" && strings.Contains(msg, `"`+c.Context+`"`):
		flag, msg = "--context", fmt.Sprintf("%q is not a context of %s", c.Context, where)
	case errors.Is(err, os.ErrNotExist) || strings.Contains(msg, "no such file"):
		msg = fmt.Sprintf("%s does not exist", where)
	default:
		msg = where + ": " + msg
	}
	return &input.Error{File: flag, Msg: msg}
}

// noneExists reports whether no file of a kubeconfig path list (as
// $KUBECONFIG gives, colon-separated) exists.
func noneExists(list string) bool {
	for _, f := range filepath.SplitList(list) {
		if _, err := os.Stat(f); err == nil || !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}

// Preflight checks, before a run creates anything, what would otherwise
// fail every point: the hosts --nodes names exist in the topologies
// (hosts) and are usable nodes; no namespace the run would create exists
// already (another run's of the same name, or not cnlab's); the cluster has CiliumNetworkPolicy when the
// points need it. Its errors are bad input (exit 2), naming the flag.
func (c *Client) Preflight(ctx context.Context, run string, hosts, namespaces []string, cilium bool) error {
	for _, h := range slices.Sorted(maps.Keys(c.Config.Nodes)) {
		if !slices.Contains(hosts, h) {
			return &input.Error{File: "--nodes", Msg: fmt.Sprintf("%s=%s: the experiment's topologies have no host %s (hosts: %s)", h, c.Config.Nodes[h], h, strings.Join(hosts, ", "))}
		}
	}
	if _, err := c.K.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("reach the API server %s: %w", c.Server, err)
	}
	for _, h := range slices.Sorted(maps.Keys(c.Config.Nodes)) {
		n := c.Config.Nodes[h]
		node, err := c.K.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return &input.Error{File: "--nodes", Msg: fmt.Sprintf("%s=%s: the cluster has no node %s", h, n, n)}
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
		if ok, why := usable(node); !ok {
			return &input.Error{File: "--nodes", Msg: fmt.Sprintf("%s=%s: node %s is %s", h, n, n, why)}
		}
	}
	for _, ns := range namespaces {
		name, err := NamespaceName(run, ns)
		if err != nil {
			return &input.Error{File: "--lab", Msg: err.Error()}
		}
		got, err := c.K.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil && !owned(got, run):
			return &input.Error{File: "--lab", Msg: fmt.Sprintf("%s: namespace %s %v; give another run name", run, name, ErrNotOwned)}
		case err == nil && got.DeletionTimestamp != nil:
			return &input.Error{File: "--lab", Msg: fmt.Sprintf("%s: namespace %s is still being deleted (by cnlab down, or the end of a run): wait until it is gone, or give another run name", run, name)}
		case err == nil:
			// A run of the same name left it (crashed), or is running now:
			// taking it over would delete that run's pods.
			return &input.Error{File: "--lab", Msg: fmt.Sprintf("%s: namespace %s exists from another run named %s (one still running, or a crash): cnlab down --backend kubernetes %s first, or give another run name", run, name, run, run)}
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("namespace %s: %w", name, err)
		}
	}
	if cilium {
		if _, err := c.K.Discovery().ServerResourcesForGroupVersion(CiliumPolicies.GroupVersion().String()); err != nil {
			return &input.Error{File: "policyMode", Msg: "terms generates a CiliumNetworkPolicy, and the cluster has no cilium.io/v2 CiliumNetworkPolicy resource (is Cilium installed?)"}
		}
	}
	return nil
}
