package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/kube"
	"github.com/cnlab/cnlab/report"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// exitInterrupted is the exit code of a run stopped by Ctrl-C or SIGTERM
// (128 + SIGINT, as shells report it).
const exitInterrupted = 130

func newRunCmd(e *env) *cobra.Command {
	var quick, plan, withReport bool
	var out, labName, output, precision string
	var backend, nodes string
	var kc kube.Config
	var unenforced bool
	var enforceTimeout time.Duration
	var seed int64
	var ov experiment.Overrides
	var warmup time.Duration
	cmd := &cobra.Command{
		Use:   "run [FILE] [--quick] [--out DIR] [--report]",
		Short: "Run an experiment: a sweep of datapaths, policies and topologies, measured",
		Long: `Run an experiment file (experiments/*.yaml; docs/methodology.md): expand its
matrix into points, run every point's workloads (iperf3 streams, cnlab rr
request/response, ping) for its repetitions in a shuffled order, rebuilding
the lab only when the topology changes, and write a results directory:
results.json (schema 1: the experiment, every sample, per-point median,
mean, stdev, CV and 95% CI), results.csv (one row per sample, a column per metric),
environment.json and logs/.

With no FILE it runs the built-in default: a quick policy-scaling sweep on
one host across the datapaths this machine has. --quick applies the file's
quick: block (shorter runs, fewer values). --plan prints the points and the
expected duration without running anything.

--report writes report.html and figures/ into the results directory when
the run ends, as cnlab report does.

--repetitions, --duration and --warmup replace the file's (every sweep's)
for a quick comparison without writing a file. --precision 2% repeats each
point, after its repetitions, until the 95% confidence interval of its
headline metric (rr: p50 latency; streams: throughput; crr: transactions
per second; ping: first RTT) is within ±2% of the mean, or it reaches
--max-repetitions (default 20), or the run --max-time; the report says
which points reached it. The flags used are recorded in results.json.

Ctrl-C keeps the finished points, marks results.json interrupted, tears
the lab down and exits 130. A point that fails is recorded with its error
and the run goes on; the exit code is then 1.

--backend kubernetes runs the points on a Kubernetes cluster instead
(docs/kubernetes.md): the topology's hosts map to nodes (--nodes, or nodes
labeled cnlab.io/host), its endpoints become agent pods in namespaces the
run creates (cnlab-RUN-NS, RUN from --lab), policies and Services are
applied with server-side apply, and every point's policies are checked to
be enforced before it is measured. It needs no root; Ctrl-C deletes the
run's namespaces, and after a crash cnlab down --backend kubernetes RUN
does.`,
		Example: `  cnlab run                                                  # the built-in default
  cnlab run experiments/thesis-policy-scaling.yaml --quick --report
  cnlab run experiments/service-chain.yaml --out results/chain-1
  cnlab run experiments/thesis-offloads.yaml --plan
  cnlab run experiments/thesis-policy-scaling.yaml --quick --repetitions 5 --duration 2s
  cnlab run --precision 2% --max-repetitions 15 --report     # the default, until ±2% or 15 samples
  cnlab run experiments/k8s-smoke.yaml --backend kubernetes --context my-cluster --quick --report
  cnlab run experiments/k8s-smoke.yaml --backend kubernetes --nodes flip=worker-1,flap=worker-2 --lab smoke-1`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			file, text := experiment.DefaultFile, experiment.DefaultText
			if len(args) == 1 {
				file = args[0]
				data, err := files.ReadInput(file)
				if err != nil {
					return usagef("%s: %v", file, err)
				}
				text = data
			}
			if backend == results.BackendKubernetes && len(args) == 0 {
				return usagef("--backend kubernetes: give an experiment file (e.g. experiments/k8s-smoke.yaml): the built-in default sweeps the lab's datapaths")
			}
			s, err := experiment.ParseFor(text, file, quick, backend)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				s.Matrix.Set("datapath", availableDatapaths(e, results.AxisOf("datapath").Strings(s.Matrix)))
			}
			if backend != results.BackendKubernetes {
				for _, name := range []string{"kubeconfig", "context", "nodes", "image", "unenforced", "enforce-timeout"} {
					if cmd.Flags().Changed(name) {
						return usagef("--%s applies with --backend kubernetes", name)
					}
				}
			} else if err := checkKubeFlags(&kc, nodes, labName, enforceTimeout); err != nil {
				return err
			}
			if cmd.Flags().Changed("seed") {
				s.Seed = &seed
			}
			if cmd.Flags().Changed("warmup") {
				ov.Warmup = &warmup
			}
			if precision != "" {
				if ov.Precision, err = results.ParsePercent(precision); err != nil || ov.Precision <= 0 {
					return usagef("--precision: %q: give the 95%% interval's half-width, e.g. 2%%", precision)
				}
			}
			flags, err := s.Override(ov)
			if err != nil {
				return err
			}
			if plan {
				return printPlan(e, s, output)
			}
			var be *kube.Backend
			if backend == results.BackendKubernetes {
				if labName == "" {
					labName = randomRunName()
				}
				if be, err = newKubeBackend(cmd.Context(), kc, s, labName); err != nil {
					return err
				}
			} else if err := needRoot(); err != nil {
				return err
			} else if labName != "" {
				// Refuse a busy lab before saying "running ...".
				if err := experiment.CheckLabFree(labName); err != nil {
					return err
				}
			}
			if out == "" {
				out = filepath.Join("results", fmt.Sprintf("%s-%s", s.Name, time.Now().Format("20060102-150405")))
			}
			if _, err := os.Stat(filepath.Join(out, "results.json")); err == nil {
				return usagef("%s already holds a run (results.json): choose another --out", out)
			}
			jobs, labs, d, _ := s.Estimate()
			builds := plural.N(labs, "lab build")
			if be != nil {
				builds = fmt.Sprintf("%s of run %s on %s", plural.N(labs, "deployment"), labName, be.C.Server)
			}
			e.progress(fmt.Sprintf("running %s: %s on %s, about %s; results in %s", s, plural.N(jobs, "run"), builds, d.Round(time.Second), out))
			o := experiment.Options{Out: out, Progress: e.stderr, Terminal: isTerminal(e.stderr), LabName: labName, Flags: flags,
				Unenforced: unenforced, EnforceTimeout: enforceTimeout}
			if be != nil {
				o.Backend = be
			}
			r, err := experiment.Run(cmd.Context(), s, text, o)
			if r == nil {
				return err
			}
			failed := printRunSummary(e, r, out, output)
			if withReport && len(r.Points) > 0 {
				// Even an interrupted run: the report draws what it has. A
				// report that fails is said, and the run's own outcome
				// still decides the exit code.
				if rerr := writeRunReport(e, out, output); rerr != nil {
					fmt.Fprintf(e.stderr, "cnlab: %v (the results are kept: cnlab report %s)\n", rerr, out)
					if err == nil && failed == 0 {
						return rerr
					}
				}
			}
			switch {
			case errors.Is(err, experiment.ErrInterrupted) && be != nil:
				fmt.Fprintf(e.stderr, "cnlab: interrupted: finished points are kept, the namespaces of run %s are deleted\n", labName)
				return exitStatus(exitInterrupted)
			case errors.Is(err, experiment.ErrInterrupted):
				fmt.Fprintf(e.stderr, "cnlab: %v\n", err)
				return exitStatus(exitInterrupted)
			case err != nil:
				return err
			case failed > 0:
				fmt.Fprintf(e.stderr, "cnlab: %s failed: see their error in %s and logs/\n", plural.N(failed, "point"), filepath.Join(out, "results.json"))
				return exitStatus(exitFail)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "apply the file's quick: block (shorter, fewer values)")
	f.StringVar(&out, "out", "", "results directory (default results/NAME-DATE-TIME)")
	f.StringVar(&labName, "lab", "", "name of the lab the run builds and tears down; no lab of that name may be up (default: a free xp-XXXX); with --backend kubernetes, the run's name (namespaces cnlab-NAME-NS)")
	f.Int64Var(&seed, "seed", 0, "seed of the shuffled order (default: the file's, else random; recorded)")
	f.BoolVar(&withReport, "report", false, "write report.html and figures/ when the run ends (as cnlab report)")
	f.BoolVar(&plan, "plan", false, "print the points and the expected duration, run nothing")
	f.IntVar(&ov.Repetitions, "repetitions", 0, "samples per point, replacing the file's (with --precision: the least)")
	f.DurationVar(&ov.Duration, "duration", 0, "measured time of each sample, replacing the file's (e.g. 2s)")
	f.DurationVar(&warmup, "warmup", 0, "unmeasured time before each sample, replacing the file's")
	f.StringVar(&precision, "precision", "", "repeat each point until its headline metric's 95% CI is within ± this of the mean (e.g. 2%)")
	f.IntVar(&ov.MaxRepetitions, "max-repetitions", 0, "with a precision target: most samples per point (default 20)")
	f.DurationVar(&ov.MaxTime, "max-time", 0, "with a precision target: no new round after the run has taken this long (e.g. 30m)")
	f.StringVarP(&output, "output", "o", "", "json: print the outcome (or the plan) as JSON on stdout")
	f.StringVar(&backend, "backend", results.BackendLab, "where to measure: lab (namespaces on this machine) or kubernetes (a cluster: docs/kubernetes.md)")
	f.StringVar(&kc.Kubeconfig, "kubeconfig", "", "kubernetes: the kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
	f.StringVar(&kc.Context, "context", "", "kubernetes: the kubeconfig's context (default: its current one)")
	f.StringVar(&nodes, "nodes", "", "kubernetes: topology hosts to nodes, e.g. flip=worker-1,flap=worker-2 (default: nodes labeled cnlab.io/host=HOST, then any)")
	f.StringVar(&kc.Image, "image", "", "kubernetes: the agent pods' image (needs sh, iperf3, ping; default: the cluster's own on a cnlab cluster, else "+kube.DefaultImage+")")
	f.BoolVar(&unenforced, "unenforced", false, "kubernetes: measure points whose policies the cluster does not enforce as they say (recorded), instead of failing them")
	f.DurationVar(&enforceTimeout, "enforce-timeout", experiment.DefaultEnforceTimeout, "kubernetes: how long to wait for the cluster to enforce a point's policies, or for its measured Service to answer")
	return cmd
}

// availableDatapaths keeps the built-in experiment's datapaths that this
// machine can run, and says why it leaves the others out.
func availableDatapaths(e *env, dps []string) []string {
	var out []string
	for _, d := range dps {
		if why := kind.Kind(d).Missing(&kind.Options{}); why != "" {
			e.progress(fmt.Sprintf("leaving datapath %s out: %s", d, why))
			continue
		}
		out = append(out, d)
	}
	return out
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func printPlan(e *env, s *experiment.Spec, output string) error {
	points, err := s.Points()
	if err != nil {
		return err
	}
	jobs, labs, d, err := s.Estimate()
	if err != nil {
		return err
	}
	maxJobs, _, maxD, err := s.EstimateMax()
	if err != nil {
		return err
	}
	if output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"experiment": s.Name, "quick": s.IsQuick(), "points": points, "runs": jobs,
			"labBuilds": labs, "estimatedSeconds": d.Seconds(), "maxRuns": maxJobs, "maxEstimatedSeconds": maxD.Seconds()})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POINT\tSWEEP\tTOPOLOGY\tSERIES\tPARAMS\tWORKLOAD")
	for _, p := range points {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, dash(p.Sweep), p.Params.Topology, seriesText(p.Series), p.Params.Text(), p.Workload.Name())
	}
	_ = tw.Flush()
	profiled := ""
	for _, p := range points {
		if p.Profile {
			profiled = ", plus profiled runs"
			break
		}
	}
	fmt.Fprintf(e.stdout, "%s: %s, %s (%s each%s), %s, about %s\n", s, plural.N(len(points), "point"), plural.N(jobs, "run"),
		plural.N(s.Repetitions, "repetition"), profiled, plural.N(labs, "lab build"), d.Round(time.Second))
	if maxJobs > jobs {
		fmt.Fprintf(e.stdout, "with its precision target, up to %s, about %s\n", plural.N(maxJobs, "run"), maxD.Round(time.Second))
	}
	return nil
}

// seriesText is a point's series for a table: a chain has no datapath
// series (none), its parameters say what it is.
func seriesText(s string) string {
	if s == string(kind.None) {
		return "-"
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printRunSummary prints each point's headline median with its CI and CV
// and returns the number of failed points.
func printRunSummary(e *env, r *results.Results, out, output string) int {
	failed := 0
	for _, p := range r.Points {
		if p.Status == results.PointFailed {
			failed++
		}
	}
	if output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"out": out, "status": r.Status, "points": len(r.Points), "failed": failed, "lab": r.Lab, "backend": r.Backend})
		return failed
	}
	pts := append([]results.PointResult(nil), r.Points...)
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].ID < pts[j].ID })
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POINT\tTOPOLOGY\tSERIES\tPARAMS\tWORKLOAD\tMETRIC\tMEDIAN\t95% CI\tCV\tN\tSTATUS")
	for _, p := range pts {
		m := results.Headline(p.Workload.Kind)
		s, ok := p.Summary[m]
		val, ci, cv := "-", "-", "-"
		if ok {
			val = fmt.Sprintf("%.4g", s.Median)
		}
		if ok && s.N > 1 { // one sample has no spread to show
			// Every metric is ≥ 0: the t interval of two samples can reach
			// below; it is shown from 0.
			ci = fmt.Sprintf("%.4g–%.4g", math.Max(s.CILow, 0), s.CIHigh)
			cv = fmt.Sprintf("%.1f%%", 100*s.CV)
		}
		status := p.Status
		if p.Error != "" {
			status += ": " + p.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", p.ID, p.Params.Topology, seriesText(p.Series), p.Params.Text(),
			p.Workload.Name(), m, val, ci, cv, s.N, status)
	}
	_ = tw.Flush()
	fmt.Fprintf(e.stdout, "results: %s\n", out)
	return failed
}

// writeRunReport reports on a run that just ended. With -o json the run's
// JSON is on stdout already: the report says where it is on stderr.
func writeRunReport(e *env, dir, output string) error {
	rep, err := report.Load(dir)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if _, err := rep.Write(dir); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if output == "json" {
		e.progress(fmt.Sprintf("report: %s (%s)", filepath.Join(dir, "report.html"), plural.N(len(rep.Figures), "figure")))
		return nil
	}
	return printReport(e, rep, "")
}
