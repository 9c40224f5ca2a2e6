package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/plural"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/kube"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

func newDownCmd(e *env) *cobra.Command {
	var all, yes bool
	var backend string
	var kc kube.Config
	cmd := &cobra.Command{
		Use:   "down LAB | --all  |  down --backend kubernetes (RUN | --all) [--kubeconfig F] [--context C]",
		Short: "Tear a lab down (or every lab), leaving nothing behind",
		Long: `Tear a lab down: kill the processes running inside it, delete its
namespaces and pins, and return once the kernel has destroyed them. What to
delete is found from the kernel's state (names tagged with the lab), so a
lab left half-built by a crash or kill -9 is removed as well. A lab that is
not there is already down: cnlab says so on stderr and exits 0 (an invalid
lab name is still bad input, exit 2).

With --backend kubernetes it deletes what a run on a cluster created (cnlab
run --backend kubernetes): the namespaces labeled with the run's name
(cnlab.io/run), or with --all every namespace cnlab created there, and
waits until they are gone. Namespaces without cnlab's labels are never
touched.

--all lists the labs it takes down on stderr; when standard input is a
terminal it asks first (--yes skips the question). Scripts, with no
terminal, are not asked.`,
		Example: `  cnlab down multi-host
  cnlab down --all    # every lab on this machine, other users' too: asks first on a terminal
  cnlab down --all -y # without asking
  cnlab down --backend kubernetes xp-1a2b --context my-cluster
  cnlab down --backend kubernetes --all`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) || len(args) > 1 {
				if backend == results.BackendKubernetes {
					return usagef("give one RUN (a run's name, as --lab gave it) or --all")
				}
				return usagef("give one LAB or --all")
			}
			switch backend {
			case results.BackendKubernetes:
				return downCluster(e, cmd, kc, args, all)
			case results.BackendLab:
				for _, f := range []string{"kubeconfig", "context"} {
					if cmd.Flags().Changed(f) {
						return usagef("--%s applies with --backend kubernetes", f)
					}
				}
			default:
				return usagef("--backend %q: lab or kubernetes", backend)
			}
			if len(args) == 1 {
				if err := lab.CheckName(args[0]); err != nil {
					return err
				}
			}
			if err := needRoot(); err != nil {
				return err
			}
			start := time.Now()
			if all {
				labs, err := lab.Labs()
				if err != nil {
					return err
				}
				if len(labs) > 0 {
					if ok, err := confirmDownAll(e, labs, isTerminal(cmd.InOrStdin()) && !yes, cmd.InOrStdin()); err != nil || !ok {
						return err
					}
				}
				labs, err = lab.DownEach(labs, e.progress)
				for _, l := range labs {
					fmt.Fprintf(e.stdout, "lab %s is down\n", l)
				}
				if len(labs) == 0 {
					fmt.Fprintln(e.stdout, "no lab is up")
				}
				return err
			}
			err := lab.Down(args[0], e.progress)
			var nf *topology.NotFoundError
			if errors.As(err, &nf) && nf.What == "lab" && nf.Lab == "" {
				// Idempotent, as deletes are in the field (CNI's DEL): a lab
				// that is not there is already down.
				fmt.Fprintf(e.stderr, "cnlab: lab %s not found: nothing to do\n", args[0])
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "lab %s is down (%.2fs)\n", args[0], time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "tear down every cnlab lab on this machine (with --backend kubernetes: everything cnlab created on the cluster)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "with --all: do not ask for confirmation on a terminal")
	cmd.Flags().StringVar(&backend, "backend", results.BackendLab, "lab, or kubernetes: what cnlab run --backend kubernetes created on a cluster")
	cmd.Flags().StringVar(&kc.Kubeconfig, "kubeconfig", "", "kubernetes: the kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
	cmd.Flags().StringVar(&kc.Context, "context", "", "kubernetes: the kubeconfig's context (default: its current one)")
	return cmd
}

// confirmDownAll lists the labs down --all would take down, on stderr,
// and, when ask (standard input is a terminal and no --yes), asks on
// stderr and reads the answer from in: only y or yes goes on. Without a
// terminal it only lists them, and goes on, as scripts expect.
func confirmDownAll(e *env, labs []string, ask bool, in io.Reader) (bool, error) {
	e.progress(fmt.Sprintf("down --all: %s on this machine: %s", plural.N(len(labs), "lab"), strings.Join(labs, ", ")))
	if !ask {
		return true, nil
	}
	fmt.Fprintf(e.stderr, "take down every one of them, other users' too? [y/N] ")
	answer, _ := bufio.NewReader(in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true, nil
	}
	fmt.Fprintln(e.stderr, "cnlab: nothing taken down (cnlab down LAB takes one down; --yes skips this question)")
	return false, exitStatus(exitFail)
}

// downCluster deletes a run's cluster-scoped policies and namespaces (or
// every one cnlab created) on a cluster and waits until they are gone.
func downCluster(e *env, cmd *cobra.Command, kc kube.Config, args []string, all bool) error {
	run := ""
	if !all {
		run = args[0]
		if err := kube.CheckRun("RUN", run); err != nil {
			return err
		}
	}
	c, err := kube.Connect(kc)
	if err != nil {
		return err
	}
	start := time.Now()
	pols, err := c.DeleteClusterPolicies(cmd.Context(), run)
	for _, p := range pols {
		fmt.Fprintf(e.stdout, "%s deleted\n", p)
	}
	if err != nil {
		return err
	}
	gone, err := c.Down(cmd.Context(), run, true)
	for _, ns := range gone {
		fmt.Fprintf(e.stdout, "namespace %s deleted\n", ns)
	}
	if err != nil {
		return err
	}
	if len(gone)+len(pols) == 0 {
		what := "run " + run
		if all {
			what = "any run"
		}
		fmt.Fprintf(e.stderr, "cnlab: nothing of %s on the cluster: nothing to do\n", what)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s down (%.2fs)\n", map[bool]string{true: "every cnlab run is", false: "run " + run + " is"}[all], time.Since(start).Seconds())
	return nil
}
