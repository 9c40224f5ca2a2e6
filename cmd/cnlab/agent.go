package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cnlab/cnlab/experiment"
	"github.com/cnlab/cnlab/experiment/results"
	"github.com/cnlab/cnlab/kube"
	"github.com/cnlab/cnlab/policy"
	"github.com/spf13/cobra"
)

// newAgentCmd holds what the kubernetes backend runs: `agent connect`
// and `agent serve` in the agent pods (the enforcement probe), and `agent
// reap` here, beside a run, stopping its commands in the pods if the run
// dies first. Hidden: users run `cnlab run --backend kubernetes`.
func newAgentCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "agent",
		Short:  "What the kubernetes backend runs (internal)",
		Hidden: true,
	}
	cmd.AddCommand(newAgentReapCmd(e), newAgentConnectCmd(e), newAgentServeCmd(e))
	return cmd
}

func newAgentReapCmd(e *env) *cobra.Command {
	var c kube.Config
	cmd := &cobra.Command{
		Use:   "reap [--kubeconfig F] [--context C]",
		Short: "Stop the commands a run still has in its agent pods when the run is gone",
		Long: `Reads on stdin the commands a run starts in its agent pods ("+ NS POD
PIDFILE") and those that ended ("- PIDFILE"). When stdin closes (the run
ended, or died: kill -9) or on SIGTERM, it stops each command still running
in its pod (SIGTERM, then SIGKILL, by an exec), whatever the container
runtime did with its closed exec stream, and exits. A run starts one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := kube.Connect(c)
			if err != nil {
				return err
			}
			n, err := cl.Reap(cmd.Context(), cmd.InOrStdin())
			if n > 0 {
				fmt.Fprintf(e.stderr, "cnlab agent reap: stopped %d commands left running in their pods\n", n)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&c.Kubeconfig, "kubeconfig", "", "the kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
	cmd.Flags().StringVar(&c.Context, "context", "", "the kubeconfig's context (default: its current one)")
	return cmd
}

func newAgentConnectCmd(e *env) *cobra.Command {
	var to, expect string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "connect --to IP:PORT --expect TOKEN [--timeout 1s]",
		Short: "Open one TCP connection to cnlab agent serve: exit 0 when it answers with TOKEN, 3 when not",
		Long: `Connects and reads the first line the server sends: exit 0 when it is
the greeting of cnlab agent serve with TOKEN, 3 when no connection was made
or something else answered (a middlebox that accepts every connection, or
another server, is not the endpoint the probe asked for).`,
		Example: `  cnlab agent connect --to 10.244.1.7:12865 --expect 3f2a --timeout 1s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := net.SplitHostPort(to); err != nil {
				return usagef("--to %q: give IP:PORT", to)
			}
			if expect == "" {
				return usagef("give --expect TOKEN (the server's)")
			}
			c, err := (&net.Dialer{Timeout: timeout}).DialContext(cmd.Context(), "tcp", to)
			if err != nil {
				fmt.Fprintf(e.stdout, "no connection: %v\n", err)
				return exitStatus(experiment.ExitNoConnection)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(timeout))
			line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
			if want := agentGreeting(expect); line != want {
				fmt.Fprintf(e.stdout, "connected, but not to cnlab agent serve %s: read %q (%v)\n", expect, line, err)
				return exitStatus(experiment.ExitNoConnection)
			}
			fmt.Fprintln(e.stdout, "connected")
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "where to connect (IP:PORT)")
	cmd.Flags().StringVar(&expect, "expect", "", "the token the server greets with")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Second, "how long to wait for the handshake and the greeting")
	return cmd
}

func agentGreeting(token string) string { return "cnlab-agent " + token + "\n" }

func newAgentServeCmd(e *env) *cobra.Command {
	var ports []int
	var token string
	cmd := &cobra.Command{
		Use:     "serve --port P [--port P2]... --token TOKEN",
		Short:   "Accept TCP connections on the ports, greet each with TOKEN and close it, until stopped",
		Example: `  cnlab agent serve --port 12865 --port 20001 --token 3f2a`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(ports) == 0 || token == "" || strings.ContainsAny(token, " \n") {
				return usagef("give --port (one or more) and --token (no spaces)")
			}
			var lns []net.Listener
			defer func() {
				for _, ln := range lns {
					ln.Close()
				}
			}()
			for _, p := range ports {
				if p < 1 || p > 65535 {
					return usagef("--port %d is not a port number", p)
				}
				ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
				if err != nil {
					return err
				}
				lns = append(lns, ln)
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						_, _ = io.WriteString(c, agentGreeting(token))
						c.Close()
					}
				}()
			}
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().IntSliceVar(&ports, "port", nil, "a TCP port to listen on (repeat for more)")
	cmd.Flags().StringVar(&token, "token", "", "what to greet each connection with")
	return cmd
}

// checkKubeFlags checks the kubernetes backend's flags before anything
// else (bad input, exit 2): --nodes, --lab, --image, --enforce-timeout.
func checkKubeFlags(kc *kube.Config, nodes, run string, enforceTimeout time.Duration) error {
	var err error
	if kc.Nodes, err = kube.ParseNodes(nodes); err != nil {
		return usagef("--nodes: %v", err)
	}
	if run != "" {
		if err := kube.CheckRun("--lab", run); err != nil {
			return err
		}
	}
	if kc.Image != "" {
		if err := kube.CheckImage(kc.Image); err != nil {
			return err
		}
	}
	if enforceTimeout <= 0 {
		return usagef("--enforce-timeout %v: give a positive duration (e.g. 30s)", enforceTimeout)
	}
	return nil
}

// randomRunName draws a run name: xp- and 4 hex digits.
func randomRunName() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("xp-%x", b)
}

// newKubeBackend connects to the cluster the flags name and checks,
// before anything is created, what would fail every point (the nodes of
// --nodes, the run's namespaces, Cilium for policyMode terms).
func newKubeBackend(ctx context.Context, c kube.Config, s *experiment.Spec, run string) (*kube.Backend, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find cnlab's own executable (streamed into the agent pods): %w", err)
	}
	cl, err := kube.Connect(c)
	if err != nil {
		return nil, err
	}
	tops, err := s.Topologies()
	if err != nil {
		return nil, err
	}
	var hosts, nss []string
	for _, t := range tops {
		for _, h := range t.Hosts {
			if !slices.Contains(hosts, h.Name) {
				hosts = append(hosts, h.Name)
			}
		}
		for _, ep := range t.Endpoints {
			if !slices.Contains(nss, ep.Namespace) {
				nss = append(nss, ep.Namespace)
			}
		}
		for ns := range t.Namespaces {
			if !slices.Contains(nss, ns) {
				nss = append(nss, ns)
			}
		}
	}
	slices.Sort(nss)
	if err := cl.Preflight(ctx, run, hosts, nss, s.UsesPolicyMode(results.ModeTerms)); err != nil {
		return nil, err
	}
	if s.UsesClusterPolicies() {
		if err := cl.CheckClusterPolicyKinds("matrix.clusterPolicies", policy.KindClusterNP); err != nil {
			return nil, err
		}
	}
	return &kube.Backend{C: cl, Self: self, Run: run}, nil
}
