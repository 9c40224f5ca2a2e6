package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/stats"
)

// doctorLab is doctor --lab LAB.
func doctorLab(e *env, cmd *cobra.Command, name, output string) error {
	if err := lab.CheckName(name); err != nil {
		return err
	}
	if err := needRoot(); err != nil {
		return err
	}
	checks, err := checkLab(cmd.Context(), name)
	if err != nil {
		return err
	}
	bad := 0
	for _, c := range checks {
		if !c.OK {
			bad++
		}
	}
	if output == "json" {
		if err := writeJSON(e.stdout, map[string]any{"lab": name, "ok": bad == 0, "checks": checks}); err != nil {
			return err
		}
	} else {
		printLabChecks(e.stdout, name, checks)
	}
	if bad > 0 {
		return exitStatus(exitFail)
	}
	return nil
}

func newDoctorCmd(e *env) *cobra.Command {
	var output, out, labName string
	var samples int
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "doctor [FILE] [--samples N] [--duration D] [-o json]  |  doctor --lab LAB [-o json]",
		Short: "Measure how noisy this machine is now, and what precision a run can reach in what time",
		Long: `Calibrate: run tcp-rr and one tcp-stream between two endpoints of a
single-host lab (the default datapath, no policy), pinned (client and server
on CPU 0, as the shipped experiments) and unpinned, --samples short samples
each (about 40 s in all by default), and say how much the samples spread
(coefficient of variation of the headline metric: p50 latency, throughput),
what the hypervisor stole and how many samples a point needs for a 95%
interval of ±2% and ±5%. With FILE, also estimate how long that experiment
needs for its precision target (2% where it sets none) at this spread.
Last, the machine's reference speed: one TCP stream and tcp-rr 100/200 on a
veth pair between two namespaces of its own, pinned to CPU 0 (about 8 s),
which cnlab run records in environment.json for the next 10 minutes.

It refuses nothing: a noisy machine is said plainly. The labs it builds are
taken down, also on Ctrl-C.

With --lab LAB it measures nothing and checks that lab instead, against
its ledger: its phase and namespaces, the devices of its hosts, links and
endpoints (present and up), its datapath's objects on every host, its flow
recorder, unfinished policy or Service changes, and its L7 proxies. It
says what is wrong, one line a check, and exits 1 when anything is.`,
		Example: `  cnlab doctor
  cnlab doctor experiments/thesis-policy-scaling.yaml --quick
  cnlab doctor --samples 16 -o json
  cnlab doctor --lab multi-host`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if labName != "" {
				for _, f := range []string{"samples", "duration", "out", "quick"} {
					if cmd.Flags().Changed(f) {
						return usagef("--%s measures this machine: it does not apply with --lab", f)
					}
				}
				if len(args) > 0 {
					return usagef("--lab checks a lab: give no experiment FILE with it")
				}
				return doctorLab(e, cmd, labName, output)
			}
			var spec *experiment.Spec
			if len(args) == 1 {
				data, err := files.ReadInput(args[0])
				if err != nil {
					return usagef("%s: %v", args[0], err)
				}
				quick, _ := cmd.Flags().GetBool("quick")
				if spec, err = experiment.Parse(data, args[0], quick); err != nil {
					return err
				}
			}
			if samples < 3 || samples > 100 {
				return usagef("--samples %d: between 3 and 100", samples)
			}
			if duration < time.Second || duration%time.Second != 0 || duration > time.Minute {
				return usagef("--duration %v: whole seconds, 1s to 1m (iperf3 measures whole seconds)", duration)
			}
			if err := needRoot(); err != nil {
				return err
			}
			c, err := experiment.Calibrate(cmd.Context(), experiment.CalibrateOptions{Samples: samples, Duration: duration, Out: out,
				Progress: e.progress})
			if err != nil {
				return err
			}
			ref, refErr := doctorReference(cmd.Context(), e)
			var est map[string]any
			if spec != nil {
				total, unknown, err := c.EstimateFor(spec)
				if err != nil {
					return err
				}
				est = map[string]any{"experiment": spec.Name, "measuredSeconds": total.Seconds(), "pointsWithoutCalibration": unknown}
			}
			if output == "json" {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"calibration": c, "estimate": est, "referenceSpeed": ref})
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKLOAD\tPINNED\tMETRIC\tSAMPLES\tMEDIAN\tCV\tFOR ±2%\tFOR ±5%")
			need := func(n int) string {
				if n == 0 {
					return "> 1000"
				}
				return fmt.Sprint(n)
			}
			for _, r := range c.Rows {
				fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%.4g\t%.1f%%\t%s\t%s\n", r.Workload, r.Pinned, r.Metric, r.Samples, r.Median, r.CVPct, need(r.Needed2), need(r.Needed5))
			}
			_ = tw.Flush()
			fmt.Fprintf(e.stdout, "samples of %v; the hypervisor stole up to %.1f%% of a CPU, CPU pressure up to %.1f%%\n",
				duration, c.Noise["maxStealPct"], c.Noise["maxCPUPressurePct"])
			for _, r := range c.Rows {
				if r.Pinned && r.CVPct > 5 {
					fmt.Fprintf(e.stdout, "noisy: pinned %s varies by %.1f%% from sample to sample; a point needs %s samples for ±2%%\n", r.Workload, r.CVPct, need(r.Needed2))
				}
			}
			if v, err := os.ReadFile(experiment.HaltPollPath); err == nil && strings.TrimSpace(string(v)) == "0" {
				fmt.Fprintf(e.stdout, "idle vCPUs halt at once (haltpoll, %s = 0): a wakeup from another CPU is slow, which unpinned rr pays on every transaction; polling 200 µs first (echo 200000 > %s, as root, until reboot) cut unpinned tcp-rr p50 from 69 to 16 µs on the development VM (docs/methodology.md)\n",
					experiment.HaltPollPath, experiment.HaltPollPath)
			}
			printReference(e, ref, refErr)
			if spec != nil {
				total := time.Duration(est["measuredSeconds"].(float64) * float64(time.Second))
				fmt.Fprintf(e.stdout, "%s: about %s of measurement to reach its precision target at this spread (plus lab builds)\n", spec.Name, total.Round(time.Second))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "", "json: print the calibration as JSON")
	f.IntVar(&samples, "samples", 8, "samples of each workload, pinned and unpinned")
	f.DurationVar(&duration, "duration", time.Second, "measured time of each sample (whole seconds)")
	f.StringVar(&out, "out", "", "keep the calibration's results directories here (default: not kept)")
	f.Bool("quick", false, "with FILE: estimate its quick: variant")
	f.StringVar(&labName, "lab", "", "check this lab instead of measuring the machine: namespaces, devices, datapath objects, recorder, changes, L7 proxies")
	return cmd
}

// doctorReference measures the machine's reference speed (a pinned
// stream and tcp-rr on one veth pair, experiment.DoctorReference), which
// the runs of the next minutes record in their environment.json. A
// failure is said, not fatal, and recorded in the JSON.
func doctorReference(ctx context.Context, e *env) (*results.ReferenceSpeed, error) {
	e.progress("measuring the reference speed: one veth pair between two namespaces, client and server on CPU 0")
	ref, err := experiment.MeasureReference(ctx, experiment.DoctorReference)
	if err != nil {
		return &results.ReferenceSpeed{MeasuredAt: time.Now().UTC(), Error: err.Error()}, err
	}
	return ref, nil
}

// printReference says the reference speed in doctor's text output.
func printReference(e *env, ref *results.ReferenceSpeed, err error) {
	if err != nil {
		fmt.Fprintf(e.stdout, "reference speed: not measured: %v\n", err)
		return
	}
	st, rr := stats.Summarize(ref.StreamGbps), stats.Summarize(ref.RRP50Us)
	fmt.Fprintf(e.stdout, "reference speed (one veth pair, pinned to CPU 0): one TCP stream %.3g Gb/s (CV %.1f%%, %d × %gs), tcp-rr 100/200 p50 %.3g µs (CV %.1f%%, %d × %gs); cnlab run records it for the next 10 minutes, cnlab compare says when two runs' differ\n",
		st.Median, 100*st.CV, st.N, ref.StreamSeconds, rr.Median, 100*rr.CV, rr.N, ref.RRSeconds)
}
