package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

func newUpCmd(e *env) *cobra.Command {
	var file, preset, name, datapath, link string
	var length, workers, filler int
	var fillerMode, hostRouting, serviceProxy string
	var connectHook, socketLB, ipsets bool
	var observeLevel string
	cmd := &cobra.Command{
		Use:   "up (-f FILE | --preset single-host|multi-host|chain|direct) [--name LAB] [--datapath D]",
		Short: "Build a lab from a topology file or a preset",
		Long: `Build a lab: every host and endpoint becomes a network namespace, tagged
with the lab's name. With no policy, every endpoint reaches every other.
If the lab is already up, nothing changes.

Datapaths (--datapath, or datapath: in the file):
` + datapathHelp() + `

Service proxies (--service-proxy, or services: {proxy: ...} in the file;
by default the lab's datapath's own: iptables, nftables or ebpf; none for chains):
` + proxyHelp(),
		Example: `  cnlab up --preset multi-host
  cnlab up --preset chain --length 5 --link bridge
  cnlab up --preset direct   # client and server on one veth pair
  cnlab up --preset single-host --datapath iptables --filler 200 --filler-mode no-match
  cnlab up -f examples/policy-lab.yaml --ipsets   # peers in ipsets, as Calico
  cnlab up --preset multi-host --datapath ebpf --host-routing legacy --connect-hook
  cnlab up -f examples/two-hosts-vxlan.yaml --name mylab
  cnlab up --preset multi-host --datapath iptables --service-proxy nftables
  cnlab up --preset single-host --datapath ebpf --socket-lb   # Services translated at connect()
  cnlab up -f examples/policy-lab.yaml --observe drops        # record denied packets (cnlab observe)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []struct {
				name string
				val  string
			}{{"name", name}, {"link", link}, {"datapath", datapath}, {"file", file}, {"preset", preset}, {"service-proxy", serviceProxy}} {
				if cmd.Flags().Changed(f.name) && f.val == "" {
					return usagef("--%s must not be empty", f.name)
				}
			}
			if cmd.Flags().Changed("length") && length < 1 {
				return usagef("--length must be at least 1 (the number of forwarding namespaces; --preset direct joins client and server on one veth pair)")
			}
			if workers < 1 || workers > 64 {
				return usagef("--workers must be between 1 and 64")
			}
			if (file == "") == (preset == "") {
				return usagef("give exactly one of -f FILE or --preset (%s)", strings.Join(topology.Presets(), ", "))
			}
			if preset != "chain" && preset != topology.PresetDirect && link != "" && preset != "multi-host" {
				return usagef("--link applies to the chain and direct (veth, bridge, ovs) and multi-host (wire, vxlan) presets")
			}
			ov := topology.Overrides{Name: name, Datapath: datapath, Proxy: serviceProxy, Observe: observeLevel, Options: kind.Overrides{FillerMode: fillerMode, HostRouting: hostRouting, ConnectHook: connectHook, SocketLB: socketLB}}
			if cmd.Flags().Changed("filler") {
				ov.Options.Filler = &filler
			}
			if ipsets {
				ov.Options.Peers = kind.PeersIPSets
			}
			var spec *topology.Spec
			var err error
			if file != "" {
				if length != 0 || link != "" {
					return usagef("--length and --link apply to presets; set them in the file")
				}
				if file == "-" {
					data, rerr := readStdin(cmd)
					if rerr != nil {
						return rerr
					}
					spec, err = topology.Parse(data, "<stdin>", ov)
				} else {
					spec, err = topology.Load(file, ov)
				}
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
			err = lab.Up(cmd.Context(), spec, lab.UpOptions{Progress: e.progress, Workers: workers})
			var already *lab.AlreadyUpError
			if errors.As(err, &already) && already.Complete && already.SameSpec {
				fmt.Fprintln(e.stdout, already.Error())
				if lvl := spec.ObserveLevel(); lvl != topology.ObserveOff && !lab.RecorderRunning(spec.Name) {
					// Its recorder died (killed): start it again.
					if _, err := lab.SetObserve(cmd.Context(), spec.Name, lvl); err != nil {
						return err
					}
					fmt.Fprintf(e.stdout, "lab %s: its recorder (observe %s) was not running: started again\n", spec.Name, lvl)
				}
				return nil
			}
			if errors.As(err, &already) && already.Complete && already.ObserveOnly {
				if observeLevel == "" { // the file's level, not asked for: keep the running one
					fmt.Fprintln(e.stdout, (&lab.AlreadyUpError{Lab: spec.Name, Complete: true, SameSpec: true}).Error())
					return nil
				}
				before, err := lab.SetObserve(cmd.Context(), spec.Name, spec.ObserveLevel())
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "lab %s is already up; observe %s -> %s\n", spec.Name, before, spec.ObserveLevel())
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "lab %s is up in %.2fs: %s\n", spec.Name, time.Since(start).Seconds(), summary(spec))
			if len(spec.Endpoints) <= 20 {
				printEndpoints(e.stdout, spec)
			} else {
				fmt.Fprintf(e.stdout, "see them with: cnlab status %s\n", spec.Name)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "topology file (YAML); - reads standard input")
	f.StringVar(&preset, "preset", "", "preset topology: "+strings.Join(topology.Presets(), ", "))
	f.StringVar(&name, "name", "", "lab name (overrides the file's or preset's)")
	f.StringVar(&datapath, "datapath", "", fmt.Sprintf("policy datapath: %s (default %s)", kind.Names(), kind.Default))
	f.StringVar(&serviceProxy, "service-proxy", "", "service proxy: "+kind.ProxyNames()+" (default: the datapath's, where it has one)")
	f.StringVar(&hostRouting, "host-routing", "", kind.EBPF.String()+" datapath: bpf (default: veth to veth, no bridge) or legacy (through the bridge)")
	f.BoolVar(&connectHook, "connect-hook", false, kind.EBPF.String()+" datapath: refuse denied TCP connects at the socket (cgroup connect4 and connect6 hooks)")
	f.BoolVar(&socketLB, "socket-lb", false, kind.EBPF.String()+" datapath: translate connections to Services at the socket (cgroup connect, sendmsg, recvmsg and getpeername hooks, IPv4 and IPv6), as Cilium's socket LB")
	f.IntVar(&length, "length", 0, "chain preset: number of forwarding namespaces (default 3)")
	f.StringVar(&link, "link", "", "chain and direct presets: veth, bridge or ovs (Open vSwitch, userspace); multi-host preset: wire or vxlan")
	f.IntVar(&workers, "workers", 4, "endpoints built in parallel")
	f.StringVar(&observeLevel, "observe", "", "record flows (cnlab observe): off, drops or all (observe: in the file; default off); on a running lab, changes only that")
	f.IntVar(&filler, "filler", 0, kind.IPTables.String()+" datapath: rules that match nothing (seed 000's rule count)")
	f.StringVar(&fillerMode, "filler-mode", "", kind.IPTables.String()+" datapath: no-match (before every rule) or top-of-chain (after the established rule)")
	f.BoolVar(&ipsets, "ipsets", false, kind.IPTables.String()+" datapath: match each peer selector through an ipset of its addresses, one rule per selector (Calico's way; iptables: {peers: ipsets})")
	return cmd
}

func summary(s *topology.Spec) string {
	if s.Chain != nil {
		return fmt.Sprintf("chain of %s between client and server (%s links)", plural.N(s.Chain.Length, "hop"), s.Chain.Link)
	}
	return fmt.Sprintf("%s, %s, %s, datapath %s", plural.N(len(s.Hosts), "host"), plural.N(len(s.Links), "link"),
		plural.N(len(s.Endpoints), "endpoint"), s.Datapath)
}

// proxyHelp lists the service proxies, and those refused with why.
func proxyHelp() string {
	var b strings.Builder
	for _, p := range kind.Proxies() {
		fmt.Fprintf(&b, "  %-9s %s\n", p, p.Summary())
	}
	b.WriteString("  (ipvs: not in this kernel)")
	return b.String()
}

// datapathHelp lists the datapaths with what each is, the default marked.
func datapathHelp() string {
	var b strings.Builder
	for _, k := range kind.All() {
		def := ""
		if k == kind.Default {
			def = " (default)"
		}
		fmt.Fprintf(&b, "  %-9s %s%s\n", k, kind.Get(k).Summary, def)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
