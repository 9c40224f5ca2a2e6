package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/labgraph"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

// graphFormats are the formats of `cnlab graph`, by their file suffix.
var graphFormats = []string{"svg", "png", "dot"}

func newGraphCmd(e *env) *cobra.Command {
	var out, format, file, preset string
	var maxEndpoints int
	cmd := &cobra.Command{
		Use:   "graph (LAB | -f FILE | --preset P) [-o FILE.svg|FILE.png|FILE.dot|-] [--format svg|png|dot]",
		Short: "Draw a lab's topology (SVG, PNG or Graphviz DOT)",
		Long: `Draw a lab's topology, as containerlab's graph draws its labs: the hosts
with their bridge, pod CIDR, datapath, service proxy and running L7 proxy,
their endpoints (name, address, veth, network namespace, ports), the links
between hosts (wire or vxlan, with their devices and addresses), a chain's
client, hops (with their network functions) and server with the segments
between them (veth, bridge or ovs). A running lab is read from its ledger
as cnlab status reads it; -f FILE or --preset draws a topology before
cnlab up (nothing is built).

The format is --format, else -o's suffix (.svg, .png, .dot or .gv), else
svg. SVG and PNG are drawn by cnlab itself (no Graphviz needed); DOT is
Graphviz's language for a layout of its own (dot -Tsvg). Without -o, svg
and png are written to LAB.svg / LAB.png in the current directory and dot
to standard output; -o - writes any format to standard output. A host
shows --max-endpoints endpoints (default 20) and sums up the rest in one
box ("… 80 more", its tooltip lists them); 0 shows every endpoint.`,
		Example: `  cnlab graph multi-host                      # writes multi-host.svg
  cnlab graph multi-host -o topo.png
  cnlab graph multi-host --format dot | dot -Tpdf > topo.pdf
  cnlab graph -f examples/two-hosts-vxlan.yaml -o vxlan.svg   # before cnlab up`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sources := 0
			for _, set := range []bool{len(args) == 1, file != "", preset != ""} {
				if set {
					sources++
				}
			}
			if sources != 1 {
				return usagef("give exactly one of LAB, -f FILE or --preset (%s), e.g. cnlab graph multi-host", strings.Join(topology.Presets(), ", "))
			}
			f, err := graphFormat(format, out)
			if err != nil {
				return err
			}
			if maxEndpoints < 0 {
				return usagef("--max-endpoints must be 0 (all) or more, not %d", maxEndpoints)
			}
			o := labgraph.Options{MaxEndpoints: maxEndpoints}
			if maxEndpoints == 0 {
				o.MaxEndpoints = -1
			}
			var sp *topology.Spec
			switch {
			case file == "-":
				data, rerr := readStdin(cmd)
				if rerr != nil {
					return rerr
				}
				sp, err = topology.Parse(data, "<stdin>", topology.Overrides{})
			case file != "":
				sp, err = topology.Load(file, topology.Overrides{})
			case preset != "":
				sp, err = topology.Preset(preset, topology.PresetOptions{}, topology.Overrides{})
			default:
				sp, o.Phase, o.L7Proxies, err = runningLab(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			g := labgraph.Build(sp, o)
			var data []byte
			switch f {
			case "svg":
				data = g.SVG()
			case "dot":
				data = g.DOT()
			case "png":
				if data, err = g.PNG(); err != nil {
					return err
				}
			}
			if out == "" && f != "dot" {
				out = sp.Name + "." + f
			}
			if out == "" || out == "-" {
				_, err := e.stdout.Write(data)
				return err
			}
			if err := files.WriteAtomic(out, data); err != nil {
				return err
			}
			e.progress(fmt.Sprintf("wrote %s (lab %s, %s)", out, sp.Name, f))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "output", "o", "", "file to write (.svg, .png, .dot); - for standard output (default LAB.svg, LAB.png; dot to standard output)")
	fl.StringVar(&format, "format", "", "svg, png or dot (default: -o's suffix, else svg)")
	fl.StringVarP(&file, "file", "f", "", "draw a topology file (YAML; - reads standard input) instead of a running lab")
	fl.StringVar(&preset, "preset", "", "draw a preset topology instead of a running lab: "+strings.Join(topology.Presets(), ", "))
	fl.IntVar(&maxEndpoints, "max-endpoints", labgraph.DefaultMaxEndpoints, "endpoints shown per host before the rest are summed up (0: all)")
	return cmd
}

// graphFormat picks the format from --format, else from the output
// file's suffix, else svg.
func graphFormat(format, out string) (string, error) {
	if format != "" {
		for _, f := range graphFormats {
			if format == f {
				return f, nil
			}
		}
		return "", usagef("unknown --format %q (%s)", format, strings.Join(graphFormats, ", "))
	}
	switch ext := strings.ToLower(filepath.Ext(out)); ext {
	case ".svg", ".png", ".dot":
		return ext[1:], nil
	case ".gv":
		return "dot", nil
	case "":
		return "svg", nil
	default:
		return "", usagef("cannot tell the format of %s from its suffix: give --format (%s)", out, strings.Join(graphFormats, ", "))
	}
}

// runningLab reads a lab that is up as status does: its spec, its health
// and the hosts whose L7 proxy answers.
func runningLab(ctx context.Context, name string) (*topology.Spec, string, []string, error) {
	s, err := lab.Status(name)
	if err != nil {
		return nil, "", nil, err
	}
	if s.Spec == nil {
		return nil, "", nil, fmt.Errorf("lab %s has namespaces but no ledger (%s): nothing to draw; cnlab down %s removes it", name, s.Health, name)
	}
	var l7 []string
	for _, h := range s.Spec.Hosts {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := l7proxy.ReadStats(c, name, h.Name); err == nil {
			l7 = append(l7, h.Name)
		}
		cancel()
	}
	return s.Spec, s.Health, l7, nil
}
