package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

func newExecCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "exec LAB ENDPOINT -- CMD...",
		Short: "Run a command inside an endpoint (or host) of a lab",
		Long: `Run a command inside an endpoint's network namespace, like
ip netns exec. ENDPOINT is namespace/name, or a bare name when it is unique.
host/NAME enters a host, hop/N the N-th forwarding namespace of a chain.
The command replaces cnlab: its exit status is cnlab's.`,
		Example: `  cnlab exec multi-host server -- iperf3 -s -D
  cnlab exec multi-host default/client -- iperf3 -c 10.0.192.3 -t 5
  cnlab exec multi-host host/flip -- ip route`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 2 || len(args) < 3 {
				return usagef("usage: cnlab exec LAB ENDPOINT -- CMD...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needRoot(); err != nil {
				return err
			}
			spec, err := topology.Open(args[0])
			if err != nil {
				return err
			}
			ns, err := resolveNetns(spec, args[1])
			if err != nil {
				return err
			}
			err = netns.Exec(ns, args[2:], os.Environ())
			return fmt.Errorf("exec %s: %w", args[2], err)
		},
	}
}

// resolveNetns maps an ENDPOINT argument to a namespace of the lab.
func resolveNetns(spec *topology.Spec, ref string) (string, error) {
	ep, err := spec.Endpoint(ref)
	if err == nil {
		return ep.Netns, nil
	}
	kind, name, ok := strings.Cut(ref, "/")
	switch {
	case ok && kind == "host" && spec.Host(name) != nil:
		return spec.Host(name).Netns, nil
	case ok && kind == "hop" && spec.Chain != nil:
		if n, cerr := strconv.Atoi(name); cerr == nil && n >= 1 && n <= spec.Chain.Length {
			return spec.Chain.Nodes[n-1].Netns, nil
		}
	}
	return "", usageError{err}
}
