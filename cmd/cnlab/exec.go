package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

func newExecCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "exec LAB ENDPOINT -- CMD...",
		Short: "Run a command inside an endpoint (or host) of a lab",
		Long: `Run a command inside an endpoint's network namespace, like
ip netns exec. ENDPOINT is namespace/name, or a bare name when it is unique.
host/NAME enters a host, hop/N the N-th forwarding namespace of a chain and
sw/N the switch of its N-th segment (link: bridge). The command replaces
cnlab: its exit status is cnlab's (127 when it cannot be found). The
command is required: for a shell, name one (-- bash).`,
		Example: `  cnlab exec multi-host server -- iperf3 -s -D
  cnlab exec multi-host default/client -- iperf3 -c 10.0.192.2 -t 5
  cnlab exec multi-host host/flip -- ip route
  cnlab exec multi-host client -- bash`,
		Args: func(cmd *cobra.Command, args []string) error {
			const usage = "usage: cnlab exec LAB ENDPOINT -- CMD..."
			const example = "e.g. cnlab exec demo x/a -- ip addr"
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(args) < 2 || dash == 0 || dash == 1:
				return usagef("%s: give the lab and the endpoint, then the command after --, %s", usage, example)
			case dash < 0 && len(args) > 2:
				return usagef("%s: put -- before the command, %s", usage, example)
			case dash > 2:
				return usagef("%s: only LAB and ENDPOINT go before --, %s", usage, example)
			case len(args) == 2:
				return usagef("%s: give the command to run after --, %s", usage, example)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needRoot(); err != nil {
				return err
			}
			converge(cmd.Context(), e, args[0])
			spec, err := lab.Open(args[0])
			if err != nil {
				return err
			}
			ns, err := resolveNetns(spec, args[1])
			if err != nil {
				return err
			}
			err = netns.Exec(ns, args[2:], os.Environ())
			fmt.Fprintf(e.stderr, "cnlab: exec %s: %v\n", args[2], err)
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
				return exitStatus(127)
			}
			return exitStatus(126)
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
	n, nerr := strconv.Atoi(name)
	numbered := nerr == nil && strconv.Itoa(n) == name && spec.Chain != nil
	switch {
	case ok && kind == "host" && spec.Host(name) != nil:
		return spec.Host(name).Netns, nil
	case ok && kind == "hop" && numbered && n >= 1 && n <= spec.Chain.Length:
		return spec.Chain.Nodes[n-1].Netns, nil
	case ok && kind == "sw" && numbered && n >= 0 && n <= spec.Chain.Length && spec.Chain.Segments[n].Switch != "":
		return spec.Chain.Segments[n].Switch, nil
	}
	var ids []string
	for _, ep := range spec.Endpoints {
		ids = append(ids, ep.ID())
	}
	for _, h := range spec.Hosts {
		ids = append(ids, "host/"+h.Name)
	}
	if spec.Chain != nil {
		ids = append(ids, fmt.Sprintf("hop/1..%d", spec.Chain.Length))
	}
	if len(ids) > 12 {
		ids = append(ids[:12], fmt.Sprintf("... (%d in all, see cnlab status %s)", len(ids), spec.Name))
	}
	return "", usageError{fmt.Errorf("%w; try one of: %s", err, strings.Join(ids, ", "))}
}
