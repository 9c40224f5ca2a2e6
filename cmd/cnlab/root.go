package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cnlab/cnlab/internal/input"

	"github.com/cnlab/cnlab/datapath"
	"github.com/cnlab/cnlab/internal/buildinfo"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

// Exit codes (contract): 0 success, 1 a check failed or the machine
// failed, 2 bad input.
const (
	exitFail     = 1
	exitBadInput = 2
)

// usageError marks bad command-line input (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitStatus carries an exit code without a message (e.g. a probe whose
// mismatches were already printed).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var st exitStatus
	if errors.As(err, &st) {
		return int(st)
	}
	fmt.Fprintf(stderr, "cnlab: %v\n", err)
	var ue usageError
	var nf *topology.NotFoundError
	var amb *topology.AmbiguousError
	if errors.As(err, &ue) || input.Is(err) || errors.As(err, &nf) || errors.As(err, &amb) ||
		errors.Is(err, datapath.ErrNoHosts) {
		return exitBadInput
	}
	return exitFail
}

// env is what every subcommand gets: where to write data and messages.
type env struct {
	stdout, stderr io.Writer
}

// progress prints a status line to stderr, keeping stdout for data.
func (e *env) progress(msg string) { fmt.Fprintf(e.stderr, "cnlab: %s\n", msg) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &env{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "cnlab",
		Short: "A container-network datapath lab on one Linux machine",
		Long: `cnlab builds container networks out of network namespaces: Docker-style
hosts with a bridge and endpoints ("containers") on it, hosts joined by a
routed wire or a VXLAN overlay, and chains of namespaces. It is the base of
a lab for comparing policy datapaths (iptables, nftables, eBPF). It needs
root.`,
		Example: `  cnlab up --preset multi-host
  cnlab exec multi-host server -- iperf3 -s -D
  cnlab exec multi-host client -- iperf3 -c 10.0.192.2 -t 5
  cnlab status
  cnlab down multi-host`,
		Version:       buildinfo.Read().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see `%s --help`)", err, c.CommandPath())}
	})
	root.AddCommand(newUpCmd(e), newDownCmd(e), newStatusCmd(e), newExecCmd(e), newPolicyCmd(e), newServiceCmd(e), newProbeCmd(e), newMonitorCmd(e), newObserveCmd(e), newRRCmd(e), newHTTPCmd(e), newRunCmd(e), newDoctorCmd(e), newReportCmd(e), newCompareCmd(e), newVersionCmd(e), newAgentCmd(e), newClusterCmd(e), newGraphCmd(e), newCaptureCmd(e))
	err := root.ExecuteContext(ctx)
	if err != nil && isCobraUsage(err) {
		return usageError{err}
	}
	return err
}

// isCobraUsage recognises cobra's own argument errors (unknown command,
// wrong number of arguments).
func isCobraUsage(err error) bool {
	var ue usageError
	if errors.As(err, &ue) {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires at most", "unknown flag", "unknown shorthand"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// needRoot fails early with a clear message instead of a netlink EPERM.
func needRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("this command needs root (network namespaces): run it with sudo")
	}
	return nil
}

// checkOutput validates an -o value.
func checkOutput(output string) error {
	if output != "" && output != "json" && output != "text" {
		return usagef("unknown output format %q (text, json)", output)
	}
	return nil
}

// readStdin reads a "-f -" argument's data.
func readStdin(cmd *cobra.Command) ([]byte, error) {
	data, err := io.ReadAll(cmd.InOrStdin())
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	return data, nil
}
