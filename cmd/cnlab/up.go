package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

func newUpCmd(e *env) *cobra.Command {
	var file, preset, name, datapath, link string
	var length, workers int
	cmd := &cobra.Command{
		Use:   "up (-f FILE | --preset single-host|multi-host|chain) [--name LAB] [--datapath D]",
		Short: "Build a lab from a topology file or a preset",
		Long: `Build a lab: every host and endpoint becomes a network namespace, tagged
with the lab's name. With no policy, every endpoint reaches every other.
If the lab is already up, nothing changes.`,
		Example: `  cnlab up --preset multi-host
  cnlab up --preset chain --length 5 --link bridge
  cnlab up -f examples/two-hosts-vxlan.yaml --name mylab`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (file == "") == (preset == "") {
				return usagef("give exactly one of -f FILE or --preset (%s)", strings.Join(topology.Presets(), ", "))
			}
			if preset != "chain" && link != "" && preset != "multi-host" {
				return usagef("--link applies to the chain (veth, bridge) and multi-host (wire, vxlan) presets")
			}
			ov := topology.Overrides{Name: name, Datapath: datapath}
			var spec *topology.Spec
			var err error
			if file != "" {
				if length != 0 || link != "" {
					return usagef("--length and --link apply to presets; set them in the file")
				}
				spec, err = topology.Load(file, ov)
			} else {
				spec, err = topology.Preset(preset, topology.PresetOptions{Length: length, Link: link}, ov)
			}
			if err != nil {
				return err
			}
			if err := needRoot(); err != nil {
				return err
			}
			start := time.Now()
			err = topology.Up(cmd.Context(), spec, topology.UpOptions{Progress: e.progress, Workers: workers})
			var already *topology.AlreadyUpError
			if errors.As(err, &already) && already.Complete && already.SameSpec {
				fmt.Fprintln(e.stdout, already.Error())
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "lab %s is up in %.2fs: %s\n", spec.Name, time.Since(start).Seconds(), summary(spec))
			printEndpoints(e.stdout, spec)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "topology file (YAML)")
	f.StringVar(&preset, "preset", "", "preset topology: "+strings.Join(topology.Presets(), ", "))
	f.StringVar(&name, "name", "", "lab name (overrides the file's or preset's)")
	f.StringVar(&datapath, "datapath", "", "datapath: "+strings.Join(topology.Datapaths, ", "))
	f.IntVar(&length, "length", 0, "chain preset: number of forwarding namespaces (default 3)")
	f.StringVar(&link, "link", "", "chain preset: veth or bridge; multi-host preset: wire or vxlan")
	f.IntVar(&workers, "workers", 4, "endpoints built in parallel")
	return cmd
}

func summary(s *topology.Spec) string {
	if s.Chain != nil {
		return fmt.Sprintf("chain of %d %s-linked hops between 2 endpoints, datapath %s", s.Chain.Length, s.Chain.Link, s.Datapath)
	}
	return fmt.Sprintf("%d hosts, %d links, %d endpoints, datapath %s", len(s.Hosts), len(s.Links), len(s.Endpoints), s.Datapath)
}
