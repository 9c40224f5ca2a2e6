package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnlab/cnlab/cluster"
)

// defaultTools is where scripts/k8s-tools.sh points at the binaries it
// built last.
func defaultTools() string {
	if d := os.Getenv("CNLAB_K8S_TOOLS_DIR"); d != "" {
		return d
	}
	root := os.Getenv("CNLAB_K8S_TOOLS")
	if root == "" {
		root = "/var/cache/cnlab/k8s-tools"
	}
	return filepath.Join(root, "current")
}

// defaultCilium is where scripts/k8s-tools.sh points at the real Cilium it
// built last.
func defaultCilium() string {
	if d := os.Getenv("CNLAB_K8S_CILIUM_DIR"); d != "" {
		return d
	}
	return filepath.Join(filepath.Dir(defaultTools()), "cilium-current")
}

func newClusterCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "A real Kubernetes cluster on this machine (up, status, down)",
		Long: `A real Kubernetes cluster on this machine, for the kubernetes backend and
for measuring cnlab beside the systems it stands in for: etcd, the
apiserver, controller-manager and scheduler, and per node Debian's
containerd, kubelet and kube-proxy (iptables or nftables mode), with real
pods on a bridge CNI and, with --policy kube-router, kube-router's firewall
enforcing NetworkPolicy; or with --cni cilium, the real Cilium (agent and
CNI plugin, its eBPF datapath compiled at run time by clang-19) as the CNI
enforcing NetworkPolicy and CiliumNetworkPolicy, with --proxy cilium as
kube-proxy's replacement too. Every node is a network namespace of its own;
nothing is written to the host's iptables, nftables, routes or /etc, and
cluster down removes everything, after kill -9 at any step too.

The Kubernetes binaries are built from their Go modules by
scripts/k8s-tools.sh (about 20 minutes cold, Cilium 4 to 15 more, cached
after); the images
(pause and the agent) are built locally: no registry is needed.`,
		Example: `  cnlab cluster up --policy kube-router
  cnlab run experiments/k8s-smoke.yaml --backend kubernetes \
      --kubeconfig /var/lib/cnlab/clusters/local/kubeconfig --quick
  cnlab cluster status -o json
  cnlab cluster down local`,
	}
	cmd.AddCommand(newClusterUpCmd(e), newClusterStatusCmd(e), newClusterDownCmd(e))
	return cmd
}

func newClusterUpCmd(e *env) *cobra.Command {
	o := cluster.Options{}
	var output string
	cmd := &cobra.Command{
		Use:   "up [--name C] [--nodes 1|2] [--cni bridge|cilium] [--proxy iptables|nftables|cilium] [--policy none|kube-router|cilium]",
		Short: "Bring a real Kubernetes cluster up on this machine",
		Example: `  cnlab cluster up
  cnlab cluster up --name two --nodes 2 --proxy nftables --policy kube-router
  cnlab cluster up --name cil --cni cilium --proxy cilium
  KUBECONFIG=$(cnlab cluster up -o json | jq -r .kubeconfig) kubectl get nodes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if err := needRoot(); err != nil {
				return err
			}
			o.Progress = e.progress
			if o.Tools == "" {
				o.Tools = defaultTools()
			}
			if o.Cilium == "" {
				o.Cilium = defaultCilium()
			}
			in, err := cluster.Up(cmd.Context(), o)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(e.stdout, in)
			}
			fmt.Fprintf(e.stdout, "cluster %s is up (%.1fs): %d node(s), CNI %s, kube-proxy %s, policy %s\n",
				in.Name, in.UpSeconds, len(in.Nodes), in.CNI, in.Proxy, in.Policy)
			fmt.Fprintf(e.stdout, "kubeconfig: %s\n", in.Kubeconfig)
			fmt.Fprintf(e.stdout, "  export KUBECONFIG=%s\n", in.Kubeconfig)
			fmt.Fprintf(e.stdout, "  cnlab run experiments/k8s-smoke.yaml --backend kubernetes --kubeconfig %s --quick\n", in.Kubeconfig)
			fmt.Fprintf(e.stdout, "  cnlab cluster down %s\n", in.Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", cluster.DefaultName, "the cluster's name")
	f.IntVar(&o.Nodes, "nodes", 1, "how many nodes (1 or 2; each a network namespace with its own containerd and kubelet)")
	f.StringVar(&o.CNI, "cni", "bridge", "the CNI: bridge (containernetworking-plugins' bridge + host-local) or cilium (the real Cilium, native routing)")
	f.StringVar(&o.Proxy, "proxy", "iptables", "kube-proxy's mode: iptables or nftables; or cilium (no kube-proxy: Cilium's replacement; needs --cni cilium)")
	f.StringVar(&o.Policy, "policy", "", "the NetworkPolicy engine: none, kube-router (its firewall: iptables + ipsets; bridge only) or cilium (default with --cni cilium, else none)")
	f.StringVar(&o.Cilium, "cilium", "", "directory of the real Cilium's build (default: what scripts/k8s-tools.sh built last)")
	f.StringVar(&o.Tools, "tools", "", "directory of the Kubernetes binaries (default: what scripts/k8s-tools.sh built last)")
	f.StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func newClusterStatusCmd(e *env) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status [C] [-o json]",
		Short: "Show the local clusters, or one: nodes, Ready, kubeconfig",
		Long: `Show the local clusters: each node with Ready as the apiserver says now,
its address and pod CIDR, and the kubeconfig. With -o json, one cluster
(named, or the only one up) prints {"name":…,"kubeconfig":…,"nodes":
[{"name":…,"ready":true,…}],"cni":…,"proxy":…,"policy":…}; otherwise
{"clusters":[…]}.`,
		Example: `  cnlab cluster status
  cnlab cluster status local -o json | jq -r .kubeconfig`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			names := args
			if len(args) == 0 {
				all, err := cluster.List()
				if err != nil {
					return err
				}
				names = all
			} else if err := cluster.CheckName(args[0]); err != nil {
				return usageError{err}
			}
			var infos []*cluster.Info
			var errs []error
			for _, n := range names {
				in, err := cluster.Status(cmd.Context(), n)
				if in != nil {
					infos = append(infos, in)
				}
				if err != nil {
					errs = append(errs, err)
				}
			}
			if output == "json" {
				// One cluster (named, or the only one up): its object, as
				// DESIGN.md's contract shows; several or none: a list.
				if len(args) == 1 || len(names) == 1 {
					if len(infos) == 0 {
						return errors.Join(errs...)
					}
					if err := writeJSON(e.stdout, infos[0]); err != nil {
						return err
					}
					return errors.Join(errs...)
				}
				if infos == nil {
					infos = []*cluster.Info{}
				}
				if err := writeJSON(e.stdout, map[string]any{"clusters": infos}); err != nil {
					return err
				}
				return errors.Join(errs...)
			}
			if len(infos) == 0 && len(errs) == 0 {
				fmt.Fprintln(e.stdout, "no cluster is up (start one with: cnlab cluster up)")
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CLUSTER\tNODE\tREADY\tIP\tPOD CIDR\tCNI\tPROXY\tPOLICY\tAGE")
			for _, in := range infos {
				for _, n := range in.Nodes {
					fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\t%s\t%s\n", in.Name, n.Name, n.Ready, n.InternalIP, n.PodCIDR,
						in.CNI, in.Proxy, in.Policy, time.Since(in.Created).Round(time.Second))
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, in := range infos {
				fmt.Fprintf(e.stdout, "%s: kubeconfig %s\n", in.Name, in.Kubeconfig)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json")
	return cmd
}

func newClusterDownCmd(e *env) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "down C | --all",
		Short: "Take a local cluster down, leaving nothing behind",
		Long: `Take a local cluster down: every process of it (found by its nodes'
namespaces, its cgroups and a marker, so a cluster left half-built by kill
-9 goes too), its pods' and nodes' namespaces with every rule inside, its
cgroups, mounts and directories, and what Kubernetes leaves in fixed paths.
A cluster that is not there is already down: cnlab says so and exits 0.`,
		Example: `  cnlab cluster down local
  cnlab cluster down --all`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) || len(args) > 1 {
				return usagef("give one cluster name or --all")
			}
			if err := needRoot(); err != nil {
				return err
			}
			start := time.Now()
			if all {
				done, err := cluster.DownAll(e.progress)
				for _, n := range done {
					fmt.Fprintf(e.stdout, "cluster %s is down\n", n)
				}
				if len(done) == 0 && err == nil {
					fmt.Fprintln(e.stdout, "no cluster is up")
				}
				return err
			}
			if err := cluster.CheckName(args[0]); err != nil {
				return usageError{err}
			}
			err := cluster.Down(args[0], e.progress)
			var nf *cluster.NotFoundError
			if errors.As(err, &nf) {
				fmt.Fprintf(e.stderr, "cnlab: cluster %s not found: nothing to do\n", args[0])
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "cluster %s is down (%.2fs)\n", args[0], time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "take down every local cluster on this machine")
	return cmd
}
