package main

import (
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/service"
	"github.com/spf13/cobra"
)

func newServiceCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "service",
		Short: "Apply, delete, show and trace Kubernetes Services of a lab",
		Long: `Services are Kubernetes v1 Service (type ClusterIP or NodePort) and
discovery.k8s.io/v1 EndpointSlice documents, in multi-document YAML files,
as written for a cluster. A Service with a selector gets its slices from
the lab's endpoints, as the EndpointSlice controller makes them. The lab's
service proxy (iptables, nftables or ebpf, chosen at up) translates them;
changes are incremental and atomic per host. docs/services.md says how.`,
	}
	cmd.AddCommand(newServiceApplyCmd(e), newServiceDeleteCmd(e), newServiceShowCmd(e), newServiceTraceCmd(e))
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return usagef("unknown service command %q (apply, delete, show, trace)", args[0])
	}
	return cmd
}

func newServiceApplyCmd(e *env) *cobra.Command {
	var files []string
	cmd := &cobra.Command{
		Use:   "apply LAB -f FILE...",
		Short: "Add or replace Services and EndpointSlices (matched by kind, namespace and name)",
		Example: `  cnlab up -f examples/services/lab.yaml
  cnlab service apply svc-lab -f examples/services/web.yaml
  cnlab probe svc-lab --service default/web --expect`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(files) == 0 {
				return usagef("give at least one -f FILE")
			}
			if err := needRoot(); err != nil {
				return err
			}
			paths, err := expandFiles(files)
			if err != nil {
				return err
			}
			var svcs []*service.Service
			var sls []*service.Slice
			for _, f := range paths {
				var s []*service.Service
				var l []*service.Slice
				var err error
				if f == "-" {
					data, rerr := readStdin(cmd)
					if rerr != nil {
						return rerr
					}
					s, l, err = service.Parse(data, "<stdin>")
				} else {
					s, l, err = service.ParseFile(f)
				}
				if err != nil {
					return err
				}
				svcs, sls = append(svcs, s...), append(sls, l...)
			}
			if err := service.CheckUnique(svcs, sls); err != nil {
				return err
			}
			ch, err := lab.ApplyServices(cmd.Context(), args[0], svcs, sls)
			if err != nil {
				return err
			}
			printServiceChange(e.stdout, ch)
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "file", "f", nil, "Service/EndpointSlice file (multi-document YAML), or a directory of them (its *.yaml, *.yml, *.json); - reads standard input; repeatable")
	return cmd
}

func printServiceChange(w io.Writer, ch *lab.ServiceChange) {
	for _, s := range []struct {
		what  string
		names []string
	}{{"created", ch.Created}, {"updated", ch.Updated}, {"unchanged", ch.Unchanged}, {"deleted", ch.Deleted}} {
		for _, n := range s.names {
			fmt.Fprintf(w, "%s %s\n", n, s.what)
		}
	}
	if r := ch.Resolved; r != nil {
		backends := 0
		for _, f := range r.Table.Frontends {
			backends += len(f.Backends)
		}
		fmt.Fprintf(w, "%s with %s now served\n", plural.N(len(r.Table.Frontends), "service port"), plural.N(backends, "backend"))
	}
}

func newServiceDeleteCmd(e *env) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "delete LAB (NAMESPACE/NAME... | --all)",
		Short: "Delete Services (with their EndpointSlices) by name, or all of them",
		Example: `  cnlab service delete svc-lab default/web
  cnlab service delete svc-lab --all`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 1) {
				return usagef("give Service names or --all (one of them)")
			}
			if err := needRoot(); err != nil {
				return err
			}
			ch, err := lab.DeleteServices(cmd.Context(), args[0], args[1:], all)
			if err != nil {
				return err
			}
			printServiceChange(e.stdout, ch)
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "delete every Service and EndpointSlice")
	return cmd
}

func newServiceShowCmd(e *env) *cobra.Command {
	var output string
	var kernel bool
	cmd := &cobra.Command{
		Use:   "show LAB [-o json] [--kernel]",
		Short: "Show the lab's Services: cluster IPs, ports and backends",
		Example: `  cnlab service show svc-lab
  cnlab service show svc-lab -o json | jq '.frontends[].backends'
  cnlab service show svc-lab --kernel   # the proxy's chains or table on each host`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if kernel {
				if err := needRoot(); err != nil {
					return err
				}
				state, err := lab.DescribeServices(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if output == "json" {
					return writeJSON(e.stdout, state)
				}
				for _, h := range slices.Sorted(maps.Keys(state)) {
					fmt.Fprintf(e.stdout, "# host %s\n%s\n", h, strings.TrimRight(state[h], "\n"))
				}
				return nil
			}
			spec, r, err := lab.ResolvedServices(args[0])
			if err != nil {
				return err
			}
			if output == "json" {
				v := serviceShowView{Lab: spec.Name, Proxy: string(spec.Services.Proxy), CIDR: spec.Services.CIDR.String(), Frontends: r.Table.Frontends}
				if all := spec.Services.All(); len(all) > 1 {
					for _, p := range all {
						v.CIDRs = append(v.CIDRs, p.String())
					}
				}
				return writeJSON(e.stdout, v)
			}
			printFrontends(e.stdout, r.Table)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: text or json")
	cmd.Flags().BoolVar(&kernel, "kernel", false, "show the proxy's kernel state on each host instead")
	return cmd
}

// serviceShowView is the JSON shape of `cnlab service show -o json`.
type serviceShowView struct {
	Lab       string             `json:"lab"`
	Proxy     string             `json:"proxy"`
	CIDR      string             `json:"cidr"`
	CIDRs     []string           `json:"cidrs,omitempty"` // a dual-stack lab's ranges, the primary first
	Frontends []service.Frontend `json:"frontends"`
}

func printFrontends(w io.Writer, t *service.Table) {
	if len(t.Frontends) == 0 {
		fmt.Fprintln(w, "no services")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tADDRESS\tNODEPORT\tBACKENDS")
	for _, f := range t.Frontends {
		np := "-"
		if f.NodePort != 0 {
			np = fmt.Sprint(f.NodePort)
		}
		var bs []string
		for _, b := range f.Backends {
			name := b.AddrPort().String()
			if b.Endpoint != "" {
				name = b.Endpoint + " " + name
			}
			bs = append(bs, name)
		}
		if len(bs) == 0 {
			bs = []string{"(none: connections refused)"}
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\n", f.Key(), netip.AddrPortFrom(f.VIP, f.Port), f.Protocol, np, strings.Join(bs, ", "))
	}
	tw.Flush()
}

func newServiceTraceCmd(e *env) *cobra.Command {
	var from, output, nodeHost, family string
	cmd := &cobra.Command{
		Use:   "trace LAB --from A NAMESPACE/NAME[:PORTNAME] [--node-port HOST] [--family 4|6|both] [-o json]",
		Short: "Explain which backends a client's new connections to a Service may reach, and why",
		Example: `  cnlab service trace svc-lab --from default/client default/web:http
  cnlab service trace svc-lab --from x/a x/web -o json
  cnlab service trace svc-lab --from x/a x/web --node-port node-2
  cnlab service trace dual-stack --from y/a x/web --family both -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if from == "" {
				return usagef("--from is required (the client endpoint)")
			}
			if err := needRoot(); err != nil {
				return err
			}
			m, err := lab.ServiceModel(args[0])
			if err != nil {
				return err
			}
			client, err := m.Lab.Endpoint(from)
			if err != nil {
				return err
			}
			fs, array, err := serviceFrontends(m.Resolved, args[1], family, output == "json")
			if err != nil {
				return err
			}
			var xs []service.Expectation
			for i, f := range fs {
				if i > 0 && output != "json" {
					fmt.Fprintln(e.stdout)
				}
				if nodeHost != "" {
					if output == "json" {
						x, err := m.ExpectNodePort(client, f, nodeHost)
						if err != nil {
							return err
						}
						xs = append(xs, x)
						continue
					}
					s, err := m.TraceNodePort(client, f, nodeHost)
					if err != nil {
						return err
					}
					fmt.Fprint(e.stdout, s)
					continue
				}
				if output == "json" {
					xs = append(xs, m.Expect(client, f))
					continue
				}
				fmt.Fprint(e.stdout, m.Trace(client, f))
			}
			if output != "json" {
				return nil
			}
			if array {
				return writeJSON(e.stdout, xs)
			}
			return writeJSON(e.stdout, xs[0])
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "client endpoint (ns/name or a unique name)")
	cmd.Flags().StringVar(&nodeHost, "node-port", "", "trace the Service's node port on this host (its bridge address) instead of the cluster IP")
	cmd.Flags().StringVar(&family, "family", "", "a dual-stack Service's family to trace: 4, 6 or both (default: every family in text, the primary in JSON; both: a JSON array)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: text or json")
	return cmd
}
