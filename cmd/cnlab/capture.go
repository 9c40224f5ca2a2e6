package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnlab/cnlab/internal/files"
	"github.com/cnlab/cnlab/internal/netns"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

// captureStop is how long tcpdump gets to write out its last packets
// after SIGINT before it is killed.
const captureStop = 5 * time.Second

func newCaptureCmd(e *env) *cobra.Command {
	var out, iface, host string
	var count int
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "capture LAB (ENDPOINT | --host H) [FILTER...] [-w FILE.pcap|-] [-c COUNT] [--duration D] [--iface IF]",
		Short: "Capture an endpoint's (or host's) packets with tcpdump into a pcap file",
		Long: `Run tcpdump inside an endpoint's network namespace, on its interface (eth0;
a chain's client and server: their device in the chain), and write what it
captures as a pcap file for Wireshark or tcpdump -r. ENDPOINT is
namespace/name (or a bare name when unique); host/NAME, hop/N and sw/N
enter a host, a chain's forwarding namespace or a chain segment's switch as
cnlab exec does, and --host H is host/H. There --iface names the interface
(e.g. br0, wire0, vxlan0; default any: every interface, Linux cooked
headers). FILTER is a tcpdump (pcap-filter) expression, e.g. icmp or tcp
port 80; put it after -- when it starts with a dash.

The capture stops at Ctrl-C, after --duration, or after -c packets, and the
file is complete in each case (tcpdump writes it packet by packet). The
file is LAB-NS-NAME.pcap in the current directory unless -w names one;
-w - writes the pcap to standard output (cnlab capture ... -w - | tcpdump
-r -). tcpdump's own messages go to standard error. It needs tcpdump
(scripts/install.sh installs it) and root.`,
		Example: `  cnlab capture multi-host client icmp -c 3           # writes multi-host-default-client.pcap
  cnlab capture multi-host default/server tcp port 5201 --duration 10s -w server.pcap
  cnlab capture multi-host --host flip --iface wire0 -c 100
  cnlab capture multi-host client -w - | tcpdump -nr -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || (host == "" && len(args) < 2) {
				return usagef("usage: cnlab capture LAB ENDPOINT [FILTER...]: give the lab and the endpoint (or --host H), e.g. cnlab capture demo x/a icmp -c 3")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 0 {
				return usagef("-c must be a count of packets (0: no limit), not %d", count)
			}
			if duration < 0 {
				return usagef("--duration must be positive, not %v", duration)
			}
			ref, filter := "", args[1:]
			if host != "" {
				ref = "host/" + host
			} else {
				ref, filter = args[1], args[2:]
			}
			if err := needRoot(); err != nil {
				return err
			}
			tcpdump, err := exec.LookPath("tcpdump")
			if err != nil {
				return errors.New("tcpdump is not installed: sudo ./scripts/install.sh installs it (or apt-get install tcpdump)")
			}
			spec, err := lab.Open(args[0])
			if err != nil {
				return err
			}
			ns, err := resolveNetns(spec, ref)
			if err != nil {
				return err
			}
			if iface == "" {
				iface = captureIface(spec, ref)
			}
			if out == "" {
				if ep, err := spec.Endpoint(ref); err == nil {
					ref = ep.ID() // a bare name: the file still says its namespace
				}
				out = captureFile(spec.Name, ref)
			}
			return capture(cmd.Context(), e, captureRun{tcpdump: tcpdump, netns: ns, iface: iface, count: count,
				duration: duration, filter: filter, out: out})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "write", "w", "", "pcap file to write; - for standard output (default LAB-NS-NAME.pcap in the current directory)")
	fl.IntVarP(&count, "count", "c", 0, "stop after this many packets (0: no limit)")
	fl.DurationVar(&duration, "duration", 0, "stop after this long (e.g. 10s; 0: until Ctrl-C or -c)")
	fl.StringVar(&iface, "iface", "", "interface to capture on (default: the endpoint's eth0; any in a host, hop or switch)")
	fl.StringVar(&host, "host", "", "capture in this host's namespace instead of an endpoint's (with --iface)")
	return cmd
}

// captureIface is the interface an ENDPOINT argument captures on by
// default: an endpoint's own (eth0, or its device in a chain), any
// elsewhere.
func captureIface(spec *topology.Spec, ref string) string {
	ep, err := spec.Endpoint(ref)
	if err != nil {
		return "any"
	}
	if c := spec.Chain; c != nil && len(c.Segments) > 0 {
		if first := c.Segments[0]; first.LeftNetns == ep.Netns {
			return first.LeftDev
		}
		if last := c.Segments[len(c.Segments)-1]; last.RightNetns == ep.Netns {
			return last.RightDev
		}
	}
	return "eth0"
}

// captureFile is the default pcap's name: LAB-NS-NAME.pcap ("host/flip"
// gives LAB-host-flip.pcap).
func captureFile(labName, ref string) string {
	return labName + "-" + strings.NewReplacer("/", "-", " ", "-").Replace(ref) + ".pcap"
}

type captureRun struct {
	tcpdump, netns, iface, out string
	count                      int
	duration                   time.Duration
	filter                     []string
}

// capture runs tcpdump in the namespace, its pcap to the file or stdout,
// and stops it with SIGINT (so that it flushes the file and prints its
// counts) at Ctrl-C or after the duration.
func capture(ctx context.Context, e *env, r captureRun) error {
	argv := []string{"-i", r.iface, "-U", "-w", "-"}
	if r.count > 0 {
		argv = append(argv, "-c", strconv.Itoa(r.count))
	}
	argv = append(argv, r.filter...)
	var w io.Writer = e.stdout
	if r.out != "-" {
		f, err := files.Create(r.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	cmd := exec.Command(r.tcpdump, argv...)
	cmd.Stdout, cmd.Stderr = w, e.stderr
	// Its own process group: a Ctrl-C reaches cnlab only, which stops
	// tcpdump once; it dies with cnlab.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := netns.Start(r.netns, cmd); err != nil {
		if r.out != "-" {
			_ = os.Remove(r.out) // nothing captured: no empty file left
		}
		return fmt.Errorf("tcpdump in %s: %w", r.netns, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timer <-chan time.Time
	if r.duration > 0 {
		t := time.NewTimer(r.duration)
		defer t.Stop()
		timer = t.C
	}
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = stopCapture(cmd, done)
	case <-timer:
		err = stopCapture(cmd, done)
	}
	if err != nil {
		if r.out != "-" {
			if fi, serr := os.Stat(r.out); serr == nil && fi.Size() == 0 {
				_ = os.Remove(r.out) // tcpdump did not start: no empty file left
			}
		}
		return fmt.Errorf("tcpdump -i %s in %s: %w (its message is above)", r.iface, r.netns, err)
	}
	if r.out != "-" {
		e.progress("wrote " + r.out)
	}
	return nil
}

// stopCapture sends tcpdump SIGINT and waits for it, killing it when it
// does not stop in time.
func stopCapture(cmd *exec.Cmd, done <-chan error) error {
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		return err
	case <-time.After(captureStop):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("did not stop within %v of SIGINT; killed", captureStop)
	}
}
