package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/report"
	"github.com/spf13/cobra"
)

func newReportCmd(e *env) *cobra.Command {
	var output, combine, series string
	var opts report.Options
	cmd := &cobra.Command{
		Use:   "report RUN_DIR [RUN_DIR... --combine OUT_DIR] [--series POINT]",
		Short: "Draw a run's figures, fit its scaling laws and write report.html",
		Long: `Read a results directory of cnlab run and write, next to results.json:
report.html (self-contained: figures inline as SVG, opens with no network)
and figures/*.png. Figures: every swept metric against its parameter, one
line per series, with 95% confidence intervals; baseline bars; chains with
the fitted power law t(n) = t(1)·(1 − l)^(n−1); perf shares of profiled
points. Fits: per-rule slopes with their CI, bends, per-hop loss. Findings:
sentences each backed by the medians of named points. Points whose CV is
above 5% are flagged, and so are samples taken under unusual noise (the
hypervisor stealing CPU time, other tasks waiting for a CPU: recorded with
every sample); --exclude-noisy leaves those out and says how many. The
findings are printed; -o json prints the whole analysis.

With --combine OUT_DIR, several runs (of the same experiment, or of files
whose sweeps share names: a lab's and a cluster's) become one report in
OUT_DIR: the points of the sweeps they all have, drawn together, each line
named after where it was measured ("kube-proxy iptables (real, cluster)",
"iptables (cnlab, lab)") and fitted on its own; their samples are never
pooled. OUT_DIR gets the combined results.json too.

With --series POINT (a point ID, as in results.csv: p0001), the report
draws that point's per-second series instead (throughput and retransmits
of streams, transactions and p50/p99 latency of rr, requests of http; one
figure per metric, every repetition overlaid) into figures/series-*.svg
and prints where; -o json prints the series themselves.`,
		Example: `  cnlab report results/thesis-policy-scaling-20261122-101500
  cnlab report results/run-1 --exclude-noisy
  cnlab report results/run-1 -o json | jq '.findings[].text'
  cnlab report results/s4-ipt results/s4-nft results/s4-lab --combine results/s4
  cnlab report results/run-1 --series p0003`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if series != "" {
				if combine != "" || len(args) > 1 {
					return usagef("--series draws a point of one results directory: give one, without --combine")
				}
				return seriesReport(e, args[0], series, output)
			}
			if combine != "" {
				return combineReport(e, args, combine, opts, output)
			}
			if len(args) > 1 {
				return usagef("give one results directory, or several with --combine OUT_DIR")
			}
			rep, err := loadReport(args[0], opts)
			if err != nil {
				return err
			}
			if _, err := rep.Write(args[0]); err != nil {
				return fmt.Errorf("write report: %w", err)
			}
			return printReport(e, rep, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: print the analysis (findings, fits, table, figures) as JSON")
	cmd.Flags().StringVar(&combine, "combine", "", "draw several runs in one report, written to this directory (with the combined results.json)")
	cmd.Flags().StringVar(&series, "series", "", "draw this point's per-second series (a point ID: p0001) as figures/series-*.svg instead of the report")
	cmd.Flags().StringVar(&series, "timeseries", "", "the same as --series")
	_ = cmd.Flags().MarkHidden("timeseries")
	cmd.Flags().BoolVar(&opts.ExcludeNoisy, "exclude-noisy", false, "leave out samples taken under unusual noise (steal, CPU pressure: docs/methodology.md); the report says how many")
	return cmd
}

// seriesReport is cnlab report DIR --series POINT.
func seriesReport(e *env, dir, point, output string) error {
	if err := isRunDir(dir); err != nil {
		return err
	}
	r, err := results.Load(dir)
	if err != nil {
		return usagef("%v", err)
	}
	ps, err := report.LoadPointSeries(dir, r, point)
	if err != nil {
		return usagef("%v", err)
	}
	if _, err := ps.Write(dir); err != nil {
		return fmt.Errorf("write series: %w", err)
	}
	if output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ps)
	}
	fmt.Fprintf(e.stdout, "point %s, %s: %s with a series\n", ps.Point, ps.Workload, plural.N(len(ps.Samples), "sample"))
	if len(ps.Missing) > 0 {
		fmt.Fprintf(e.stdout, "note: %s without one (repetitions %s)\n", plural.N(len(ps.Missing), "sample"), results.JoinInts(ps.Missing))
	}
	for _, f := range ps.Figures {
		fmt.Fprintf(e.stdout, "%s: %s\n", f.Metric, f.SVG)
	}
	return nil
}

// loadReport reads a run directory; a directory that is not a run is bad
// input.
func loadReport(dir string, o report.Options) (*report.Report, error) {
	if err := isRunDir(dir); err != nil {
		return nil, err
	}
	rep, err := report.LoadWith(dir, o)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return rep, nil
}

// combineReport is cnlab report RUN_DIR... --combine OUT.
func combineReport(e *env, dirs []string, out string, o report.Options, output string) error {
	for _, d := range dirs {
		if err := isRunDir(d); err != nil {
			return err
		}
		if filepath.Clean(d) == filepath.Clean(out) {
			return usagef("--combine %s: is one of the runs; give a directory of its own", out)
		}
	}
	rep, err := report.LoadCombined(dirs, out, o)
	if err != nil {
		return usagef("%v", err)
	}
	if _, err := rep.WriteCombined(out); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return printReport(e, rep, output)
}

// isRunDir checks that dir is a results directory.
func isRunDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef("%s: no such directory", dir)
	case err != nil:
		return err
	case !st.IsDir():
		return usagef("%s: not a directory: give the results directory of cnlab run (the one with results.json)", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "results.json")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return usagef("%s: no results.json: not a results directory of cnlab run", dir)
		}
		return err
	}
	return nil
}

func printReport(e *env, rep *report.Report, output string) error {
	if output == "json" {
		type fig struct {
			report.Figure
			PNG string `json:"png"`
		}
		var figs []fig
		for _, f := range rep.Figures {
			figs = append(figs, fig{f, filepath.Join(rep.Dir, "figures", f.ID+".png")})
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*report.Report
			HTML    string `json:"html"`
			Figures []fig  `json:"figures"`
		}{rep, filepath.Join(rep.Dir, "report.html"), figs})
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(e.stdout, "note: %s\n", n)
	}
	if len(rep.Findings) > 0 {
		fmt.Fprintln(e.stdout, "Findings:")
		for _, f := range rep.Findings {
			fmt.Fprintf(e.stdout, "- %s\n", f.Text)
		}
	}
	printUnitCosts(e, rep)
	if rep.Noisy > 0 {
		fmt.Fprintf(e.stdout, "%d of %s of the report's table (every headline metric of every point: throughput, p50/p99 latency, rate, loss) have a CV above %.0f%% (marked ⚠).\n", rep.Noisy, plural.N(len(rep.Rows), "row"), 100*report.CVWarn)
	}
	fmt.Fprintf(e.stdout, "report: %s (%s in %s)\n", filepath.Join(rep.Dir, "report.html"), plural.N(len(rep.Figures), "figure"), filepath.Join(rep.Dir, "figures"))
	return nil
}

func newCompareCmd(e *env) *cobra.Command {
	var output, html, paired string
	var threshold, minChange float64
	cmd := &cobra.Command{
		Use:   "compare RUN_A RUN_B [--html FILE] [--threshold PCT] | compare RUN --paired PARAM=A,B",
		Short: "Say what changed between two runs, point by point, with a significance test",
		Long: `Match the points of two results directories (same sweep, parameters and
workload) and, for every headline metric, print both medians, the change
in percent and the p-value of a two-sided Mann–Whitney U test on their
samples. A change that is not significant (p ≥ 0.05), or smaller than
--min-change (default 2%: two runs of the same pinned experiment differ
by up to ~1.5% on the development VM), prints as "~", as benchstat does. Small samples cannot reach significance: 2 vs 2 samples
never do (p ≥ 0.33), 4 vs 4 can.

--threshold PCT makes compare a CI gate: it exits 1 when a metric got
significantly worse by at least PCT percent (throughput down, latency up).

--paired PARAM=A,B compares within one run the points that differ only in
PARAM (datapath=iptables,ebpf; policies=0,100), round by round: the samples
of A and B from the same round are a pair, so slow drift of the machine
cancels in their ratio. It prints B/A (geometric mean of the per-round
ratios) with its 95% interval and the paired t-test's p, and the unpaired
Mann–Whitney p of the same samples for contrast.`,
		Example: `  cnlab compare results/before results/after
  cnlab compare results/before results/after --threshold 5     # exit 1 on a >= 5% regression
  cnlab compare results/a results/b --html compare.html -o json
  cnlab compare results/run --paired datapath=iptables,ebpf`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if paired != "" {
				return comparePaired(e, args, paired, output)
			}
			if len(args) != 2 {
				return usagef("give two results directories (or one with --paired PARAM=A,B)")
			}
			gate := cmd.Flags().Changed("threshold")
			if gate && (threshold < 0 || threshold > 1000) {
				return usagef("--threshold %g: a percentage between 0 and 1000", threshold)
			}
			var runs [2]*results.Results
			for i, dir := range args {
				if err := isRunDir(dir); err != nil {
					return err
				}
				r, err := results.Load(dir)
				if err != nil {
					return usagef("%v", err)
				}
				runs[i] = r
			}
			t := -1.0
			if gate {
				t = threshold / 100
			}
			if minChange < 0 || minChange > 1000 {
				return usagef("--min-change %g: a percentage between 0 and 1000", minChange)
			}
			c := report.Compare(runs[0], runs[1], t, minChange/100)
			c.A, c.B = args[0], args[1]
			envA, _ := results.LoadEnvironment(args[0])
			envB, _ := results.LoadEnvironment(args[1])
			c.Reference = report.CompareReference(envA, envB)
			if len(c.Changes) == 0 && len(c.Missing) == 0 {
				return usagef("no point of %s matches one of %s (same sweep, parameters and workload): are they runs of the same experiment?", args[0], args[1])
			}
			if html != "" {
				page, err := c.HTML()
				if err != nil {
					return err
				}
				if err := files.WriteAtomic(html, page); err != nil {
					return fmt.Errorf("write %s: %w", html, err)
				}
			}
			if output == "json" {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(c); err != nil {
					return err
				}
			} else if err := c.Text(e.stdout); err != nil {
				return err
			}
			if html != "" {
				e.progress("comparison page: " + html)
			}
			if gate && c.Regressions > 0 {
				fmt.Fprintf(e.stderr, "cnlab: %s of %g%% or more\n", plural.N(c.Regressions, "significant regression"), threshold)
				return exitStatus(exitFail)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&html, "html", "", "also write the comparison as an HTML page to FILE")
	f.Float64Var(&threshold, "threshold", 0, "exit 1 when a metric got significantly worse by at least PCT percent")
	f.Float64Var(&minChange, "min-change", 100*report.DefaultMinChange, "smallest change in percent to report: a significant change below it prints as ~")
	f.StringVarP(&output, "output", "o", "", "json: print the comparison as JSON")
	f.StringVar(&paired, "paired", "", "PARAM=A,B: within one run, compare the points differing only in PARAM, paired by round")
	return cmd
}

// comparePaired is compare RUN --paired PARAM=A,B.
func comparePaired(e *env, args []string, spec, output string) error {
	if len(args) != 1 {
		return usagef("--paired compares within one run: give one results directory")
	}
	param, vals, ok := strings.Cut(spec, "=")
	a, b, ok2 := strings.Cut(vals, ",")
	if !ok || !ok2 || param == "" || a == "" || b == "" || strings.Contains(b, ",") {
		return usagef("--paired %q: give PARAM=A,B, e.g. datapath=iptables,ebpf", spec)
	}
	if err := isRunDir(args[0]); err != nil {
		return err
	}
	r, err := results.Load(args[0])
	if err != nil {
		return usagef("%v", err)
	}
	c, err := report.ComparePaired(r, param, a, b)
	if err != nil {
		return usagef("%s: %v", args[0], err)
	}
	if output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	return c.Text(e.stdout)
}

// printUnitCosts lists what each unit of every sweep's axis costs per
// packet (report.UnitCost), the seed's beside it where it published one.
func printUnitCosts(e *env, rep *report.Report) {
	var lines []string
	for _, uc := range rep.UnitCosts {
		if uc.Text != "" {
			lines = append(lines, uc.Text)
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(e.stdout, "Costs per packet:")
	for _, l := range lines {
		fmt.Fprintf(e.stdout, "- %s\n", l)
	}
}
