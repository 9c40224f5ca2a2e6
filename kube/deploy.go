package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnlab/cnlab/topology"
)

// Pod is an endpoint's agent pod, once it runs.
type Pod struct {
	Namespace   string     `json:"namespace"`
	Name        string     `json:"name"`
	Node        string     `json:"node"`
	IP          netip.Addr `json:"ip"`
	HostNetwork bool       `json:"hostNetwork,omitempty"`
}

// Deployment is a topology's endpoints as agent pods on a cluster.
type Deployment struct {
	Run        string            `json:"run"`
	Namespaces map[string]string `json:"namespaces"` // topology namespace -> cluster namespace
	Pods       map[string]Pod    `json:"pods"`       // endpoint ID (ns/name) -> its pod
	// Agent is the path of cnlab's own binary inside the pods.
	Agent string `json:"agent"`
}

// PodTimeout bounds how long Deploy waits for a pod to run.
var PodTimeout = 3 * time.Minute

// Deploy makes spec's endpoints run as agent pods of run, placed as pl
// says, with cnlab's binary (self) in them. Namespaces are created when
// missing (refused when a namespace of that name exists that cnlab did
// not create) and kept; the run's pods, policies and Services from before
// are deleted first, since a pod's placement cannot change. progress gets a
// line per step (may be nil).
func (c *Client) Deploy(ctx context.Context, run string, spec *topology.Spec, pl Placement, self string, progress func(string)) (*Deployment, error) {
	if progress == nil {
		progress = func(string) {}
	}
	d := &Deployment{Run: run, Namespaces: map[string]string{}, Pods: map[string]Pod{}}
	for _, ns := range slices.Sorted(maps.Keys(spec.Namespaces)) {
		name, err := NamespaceName(run, ns)
		if err != nil {
			return nil, err
		}
		d.Namespaces[ns] = name
	}
	for _, ep := range spec.Endpoints {
		if _, ok := d.Namespaces[ep.Namespace]; !ok {
			name, err := NamespaceName(run, ep.Namespace)
			if err != nil {
				return nil, err
			}
			d.Namespaces[ep.Namespace] = name
		}
		if _, ok := pl.Nodes[ep.ID()]; !ok {
			return nil, fmt.Errorf("endpoint %s has no node", ep.ID())
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(d.Namespaces)) {
		name := d.Namespaces[ns]
		got, err := c.K.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil && !owned(got, run):
			return nil, fmt.Errorf("namespace %s %w", name, ErrNotOwned)
		case err == nil && got.DeletionTimestamp != nil:
			return nil, fmt.Errorf("namespace %s is being deleted (by an earlier cnlab down): wait until it is gone, or give another --lab", name)
		case err != nil && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("namespace %s: %w", name, err)
		}
		if _, err := c.K.CoreV1().Namespaces().Apply(ctx, namespaceManifest(run, name, spec.Namespaces[ns]), metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return nil, fmt.Errorf("create namespace %s: %w", name, err)
		}
	}
	if err := c.deletePods(ctx, run, d.Namespaces); err != nil {
		return nil, err
	}
	if err := c.ApplyPolicies(ctx, run, sortedNamespaces(d.Namespaces), nil); err != nil {
		return nil, err
	}
	if _, err := c.ApplyServices(ctx, run, sortedNamespaces(d.Namespaces), nil); err != nil {
		return nil, err
	}
	for _, ns := range sortedNamespaces(d.Namespaces) {
		if err := c.waitServiceAccount(ctx, ns); err != nil {
			return nil, err
		}
	}
	progress(fmt.Sprintf("creating %d agent pods (image %s)", len(spec.Endpoints), c.Config.Image))
	for _, ep := range spec.Endpoints {
		pod := agentPod(run, d.Namespaces[ep.Namespace], ep, pl.Nodes[ep.ID()], c.Config.Image, pl.HostNetwork)
		if _, err := c.K.CoreV1().Pods(d.Namespaces[ep.Namespace]).Apply(ctx, pod, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			return nil, fmt.Errorf("create pod for %s: %w", ep.ID(), err)
		}
	}
	for _, ep := range spec.Endpoints {
		p, err := c.waitRunning(ctx, d.Namespaces[ep.Namespace], ep.Name)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", ep.ID(), err)
		}
		d.Pods[ep.ID()] = p
	}
	if self != "" {
		agent, err := c.installAgent(ctx, d, self, progress)
		if err != nil {
			return nil, err
		}
		d.Agent = agent
	}
	return d, nil
}

// waitServiceAccount waits for the namespace's default ServiceAccount,
// without which the API server refuses pods.
func (c *Client) waitServiceAccount(ctx context.Context, ns string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.K.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s: default ServiceAccount: %w", ns, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s: no default ServiceAccount after 1 minute (is the controller-manager's serviceaccount controller running?)", ns)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitRunning waits until a pod runs and has an address, and says why
// when it does not within PodTimeout (the scheduler's or the kubelet's
// reason).
func (c *Client) waitRunning(ctx context.Context, ns, name string) (Pod, error) {
	deadline := time.Now().Add(PodTimeout)
	for {
		p, err := c.K.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return Pod{}, fmt.Errorf("pod %s/%s: %w", ns, name, err)
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil {
				return Pod{Namespace: ns, Name: name, Node: p.Spec.NodeName, IP: ip, HostNetwork: p.Spec.HostNetwork}, nil
			}
		case corev1.PodFailed, corev1.PodSucceeded:
			return Pod{}, fmt.Errorf("pod %s/%s ended (%s): %s", ns, name, p.Status.Phase, podReason(p))
		}
		if time.Now().After(deadline) {
			return Pod{}, fmt.Errorf("pod %s/%s not running after %v: %s", ns, name, PodTimeout, podReason(p))
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return Pod{}, err
		}
	}
}

// podReason is why a pod is not running, as the scheduler or kubelet
// says.
func podReason(p *corev1.Pod) string {
	var why []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			why = append(why, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			why = append(why, fmt.Sprintf("container %s: %s %s", cs.Name, w.Reason, w.Message))
		}
		if t := cs.State.Terminated; t != nil {
			why = append(why, fmt.Sprintf("container %s: exited %d (%s)", cs.Name, t.ExitCode, t.Reason))
		}
	}
	if len(why) == 0 {
		return "phase " + string(p.Status.Phase)
	}
	return strings.Join(why, "; ")
}

// installAgent streams cnlab's own binary into every pod that does not
// hold it yet (pods on a node may share its /tmp, as in a host network)
// and checks that it runs there. It goes to the pod's $TMPDIR (default
// /tmp), in a directory named after the binary's hash.
func (c *Client) installAgent(ctx context.Context, d *Deployment, self string, progress func(string)) (string, error) {
	f, err := os.Open(self)
	if err != nil {
		return "", fmt.Errorf("open cnlab's own binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	path := ""
	for _, id := range slices.Sorted(maps.Keys(d.Pods)) {
		p := d.Pods[id]
		out, err := c.Output(ctx, p.Namespace, p.Name, "sh", "-c", `echo "${TMPDIR:-/tmp}"`)
		if err != nil {
			return "", fmt.Errorf("exec into pod %s/%s (the image needs sh): %w", p.Namespace, p.Name, err)
		}
		dir := strings.TrimSpace(out) + "/cnlab-" + sum
		switch {
		case !strings.HasPrefix(dir, "/"):
			return "", fmt.Errorf("pod %s/%s: $TMPDIR %q is not an absolute path", p.Namespace, p.Name, strings.TrimSpace(out))
		case path == "":
			path = dir + "/cnlab"
		case path != dir+"/cnlab":
			return "", fmt.Errorf("pod %s/%s has another $TMPDIR (%s) than the others (%s): give every agent the same image", p.Namespace, p.Name, dir, path)
		}
		if _, err := c.Output(ctx, p.Namespace, p.Name, "test", "-x", path); err != nil {
			var xe *ExitError
			if !errors.As(err, &xe) {
				return "", fmt.Errorf("exec into pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			progress(fmt.Sprintf("copying cnlab into pod %s/%s", p.Namespace, p.Name))
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return "", err
			}
			// head -c: a known length, since not every runtime passes the
			// end of stdin on (kwok does not).
			script := `mkdir -p "$0" && head -c "$1" > "$0/.cnlab.$$" && chmod 755 "$0/.cnlab.$$" && mv -f "$0/.cnlab.$$" "$0/cnlab"`
			if err := c.Exec(ctx, p.Namespace, p.Name, []string{"sh", "-c", script, dir, strconv.FormatInt(size, 10)}, f, nil, nil); err != nil {
				return "", fmt.Errorf("copy cnlab into pod %s/%s (the image needs sh, head, chmod and mv, and a writable $TMPDIR or /tmp): %w", p.Namespace, p.Name, err)
			}
		}
		if _, err := c.Output(ctx, p.Namespace, p.Name, path, "version"); err != nil {
			return "", fmt.Errorf("cnlab does not run in pod %s/%s (another CPU architecture than this machine's?): %w", p.Namespace, p.Name, err)
		}
	}
	return path, nil
}

// deletePods deletes the run's pods in its namespaces and waits until
// they are gone.
func (c *Client) deletePods(ctx context.Context, run string, nsMap map[string]string) error {
	sel := metav1.ListOptions{LabelSelector: RunLabel + "=" + run}
	for _, ns := range sortedNamespaces(nsMap) {
		if err := c.K.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, sel); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the pods of run %s in %s: %w", run, ns, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, ns := range sortedNamespaces(nsMap) {
		for {
			l, err := c.K.CoreV1().Pods(ns).List(ctx, sel)
			if err != nil {
				return fmt.Errorf("list pods in %s: %w", ns, err)
			}
			if len(l.Items) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d pods of run %s in %s still there after 2 minutes", len(l.Items), run, ns)
			}
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// Down deletes everything of a run (every run's when run is ""): its
// cluster-scoped policies (DeleteClusterPolicies), then the namespaces
// labeled with it, which takes their pods and policies along. It waits
// until the namespaces are gone when wait is set, and returns the
// namespaces it deleted. Namespaces without cnlab's labels are never
// touched.
func (c *Client) Down(ctx context.Context, run string, wait bool) ([]string, error) {
	if _, err := c.DeleteClusterPolicies(ctx, run); err != nil {
		return nil, err
	}
	sel := ManagedLabel + "=" + FieldManager
	if run != "" {
		sel += "," + RunLabel + "=" + run
	}
	l, err := c.K.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list cnlab's namespaces: %w", err)
	}
	var gone []string
	for _, ns := range l.Items {
		if !owned(&ns, run) || !strings.HasPrefix(ns.Name, NamespacePrefix) {
			continue
		}
		if err := c.K.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return gone, fmt.Errorf("delete namespace %s: %w", ns.Name, err)
		}
		gone = append(gone, ns.Name)
	}
	if !wait {
		return gone, nil
	}
	deadline := time.Now().Add(3 * time.Minute)
	for _, name := range gone {
		for {
			_, err := c.K.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				return gone, fmt.Errorf("namespace %s still there after 3 minutes (finalizers? kubectl get ns %s -o yaml)", name, name)
			}
			if err := sleep(ctx, 250*time.Millisecond); err != nil {
				return gone, err
			}
		}
	}
	return gone, nil
}

func ptr[T any](v T) *T { return &v }

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
