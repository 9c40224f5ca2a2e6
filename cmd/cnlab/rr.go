package main

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/traffic"
	"github.com/spf13/cobra"
)

// newRRCmd is cnlab's request/response tool (netperf's TCP_RR, TCP_CRR and
// UDP_RR; netperf is not packaged), run inside endpoints with cnlab exec.
func newRRCmd(e *env) *cobra.Command {
	var c traffic.RRConfig
	var bind, to, output string
	var port int
	cmd := &cobra.Command{
		Use:   "rr (server|client) [flags]",
		Short: "Request/response latency and rate (tcp-rr, tcp-crr, udp-rr), like netperf",
		Long: `A request/response workload with blocking sockets, as netperf's TCP_RR,
TCP_CRR and UDP_RR: the client sends a request of --request-size bytes and
waits for a response of --response-size bytes, back to back for --duration
after --warmup, and reports transactions per second and the latency
distribution (p50, p90, p99, p99.9 from a histogram with 0.1% resolution).
Server and client must be given the same mode and sizes: the protocol
carries no header, so a client that differs fails with an error that says
so (at once when the server's reply shows it, after the stall otherwise). A
client started together with its server waits up to a second for it to
listen. The examples run in the README's first lab (cnlab up --preset
multi-host; server 10.0.192.2), with cnlab on the PATH (make install).`,
		Example: `  cnlab exec multi-host server -- cnlab rr server --request-size 100 --response-size 200 &
  cnlab exec multi-host client -- cnlab rr client --to 10.0.192.2:12865 --request-size 100 --response-size 200 --duration 5s
  cnlab exec multi-host server -- cnlab rr server --mode tcp-crr --port 12866 &
  cnlab exec multi-host client -- cnlab rr client --mode tcp-crr --to 10.0.192.2:12866 -o json
  cnlab exec multi-host server -- cnlab rr server --mode udp-rr --port 12867 &
  cnlab exec multi-host client -- cnlab rr client --mode udp-rr --to 10.0.192.2:12867 --duration 3s
  cnlab exec dual-stack x/a -- cnlab rr server --bind :: &
  cnlab exec dual-stack x/b -- cnlab rr client --to [fd00:0:192::10]:12865`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "server" && args[0] != "client") {
				return usagef("give server or client: cnlab rr server|client [flags]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if args[0] == "server" {
				if port < 1 || port > 65535 {
					return usagef("--port %d is not a port number", port)
				}
				ip, err := netip.ParseAddr(bind)
				if err != nil || ip.Zone() != "" {
					return usagef("--bind %q: an IPv4 or IPv6 address (:: listens on both)", bind)
				}
				c.Addr = netip.AddrPortFrom(ip, uint16(port)).String()
				if c.Duration == 0 {
					c.Duration = time.Second // only checked, not used
				}
				if err := c.Check(); err != nil {
					return usagef("%v", err)
				}
				fmt.Fprintf(e.stderr, "rr %s server on %s (request %d B, response %d B)\n", c.Mode, c.Addr, c.RequestSize, c.ResponseSize)
				return traffic.RRServe(cmd.Context(), c, nil)
			}
			if _, err := netip.ParseAddrPort(to); err != nil {
				return usagef("--to %q: IPv4:port or [IPv6]:port of the server", to)
			}
			c.Addr = to
			if err := c.Check(); err != nil {
				return usagef("%v", err)
			}
			r, err := traffic.RRRun(cmd.Context(), c)
			if err != nil {
				return err
			}
			if output == "json" {
				return traffic.WriteRR(e.stdout, r)
			}
			l := r.LatencyUs
			fmt.Fprintf(e.stdout, "%s %d/%d B: %.0f transactions/s over %.1f s; latency us: mean %.1f p50 %.1f p90 %.1f p99 %.1f p99.9 %.1f max %.1f\n",
				r.Mode, r.RequestSize, r.ResponseSize, r.PerSecond, r.Seconds, l.Mean, l.P50, l.P90, l.P99, l.P999, l.Max)
			if k := r.ConnectUs; k != nil {
				fmt.Fprintf(e.stdout, "connect alone, us: mean %.1f p50 %.1f p90 %.1f p99 %.1f p99.9 %.1f max %.1f\n",
					k.Mean, k.P50, k.P90, k.P99, k.P999, k.Max)
			}
			if r.Timeouts > 0 {
				fmt.Fprintf(e.stdout, "%s timed out (lost datagrams)\n", plural.N(int(r.Timeouts), "transaction"))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Mode, "mode", traffic.TCPRR, "tcp-rr, tcp-crr or udp-rr")
	f.IntVar(&c.RequestSize, "request-size", 1, "bytes per request (netperf's default 1; the seed thesis used 100)")
	f.IntVar(&c.ResponseSize, "response-size", 1, "bytes per response (netperf's default 1; the seed thesis used 200)")
	f.DurationVar(&c.Duration, "duration", 10*time.Second, "client: measured time")
	f.DurationVar(&c.Warmup, "warmup", time.Second, "client: time before measuring")
	f.DurationVar(&c.Timeout, "timeout", time.Second, "client: per transaction (udp-rr: a lost datagram)")
	f.StringVar(&to, "to", "", "client: server address, IPv4:port or [IPv6]:port")
	f.IntVar(&port, "port", 12865, "server: port to listen on")
	f.StringVar(&bind, "bind", "0.0.0.0", "server: address to listen on (:: for IPv6, and IPv4 too)")
	f.StringVarP(&output, "output", "o", "", "client output: json")
	return cmd
}
