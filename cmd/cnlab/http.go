package main

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/traffic"
	"github.com/spf13/cobra"
)

// newHTTPCmd is cnlab's HTTP load workload (a server and a client, as
// rr's), run inside endpoints with cnlab exec.
func newHTTPCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "http",
		Short: "HTTP load: requests per second, latency and statuses, like ab",
		Long: `An HTTP/1.1 workload. The server answers every request with one status
(200) and the body "<name> <METHOD> <path>\n". The client sends requests
from --concurrency workers, each waiting for its response before the next,
for --duration or --requests, and reports requests per second, the
latency distribution (p50, p90, p99 from a histogram with 0.1% resolution)
and the count of every status. With --mode keepalive each worker reuses
one connection whatever the status (a 403 keeps it open); with --mode new
each request opens a new one (Connection: close). A request that gets no
response (refused, reset, or no response within --timeout) counts as an
error. The client exits with 1 when a response's status is not one of
--expect, or a request failed. The examples run in the README's first lab
(cnlab up --preset multi-host; server 10.0.192.2), with cnlab on the PATH
(make install).`,
		Example: `  cnlab exec multi-host server -- cnlab http server --listen :80 --name web &
  cnlab exec multi-host client -- cnlab http client --url http://10.0.192.2/ --concurrency 4 --duration 5s
  cnlab exec multi-host client -- cnlab http client --url http://10.0.192.2/admin --method POST --header 'X-Role: guest' --expect 403
  cnlab exec multi-host client -- cnlab http client --url http://10.0.192.2/ --mode new --requests 1000 -o json`,
	}
	cmd.AddCommand(newHTTPServerCmd(e), newHTTPClientCmd(e))
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return usagef("unknown http command %q (server, client)", args[0])
	}
	return cmd
}

func newHTTPServerCmd(e *env) *cobra.Command {
	var c traffic.HTTPServerConfig
	cmd := &cobra.Command{
		Use:   "server [--listen ADDR] [--name NAME] [--status CODE]",
		Short: "Answer every HTTP request with one status and a line naming the server",
		Example: `  cnlab http server --listen :80 --name web
  cnlab http server --listen 127.0.0.1:8080 --status 403`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.Check(); err != nil {
				return usagef("--%v", err)
			}
			ready := make(chan net.Addr, 1)
			errc := make(chan error, 1)
			go func() { errc <- traffic.ServeHTTP(cmd.Context(), c, ready) }()
			select {
			case addr := <-ready:
				fmt.Fprintf(e.stderr, "http server %q on %s\n", c.Name, addr)
			case err := <-errc:
				return err
			}
			return <-errc
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Addr, "listen", ":80", "address to listen on, [host]:port")
	f.StringVar(&c.Name, "name", "cnlab", "first word of every response body")
	f.IntVar(&c.Status, "status", 200, "status of every response")
	return cmd
}

func newHTTPClientCmd(e *env) *cobra.Command {
	var c traffic.HTTPConfig
	var output string
	cmd := &cobra.Command{
		Use:   "client --url URL [flags]",
		Short: "Send HTTP requests; report requests/s, latency percentiles and statuses",
		Example: `  cnlab http client --url http://10.0.192.2/ --duration 5s
  cnlab http client --url http://10.0.192.2/deny --expect 403 --mode new --concurrency 8 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if c.Requests > 0 && !cmd.Flags().Changed("duration") {
				c.Duration = 0 // --requests alone: no time limit
			}
			if c.Concurrency == 0 {
				return usagef("--concurrency 0: 1 to 10000")
			}
			if c.Timeout == 0 {
				return usagef("--timeout must be positive")
			}
			if err := c.Check(); err != nil {
				return usagef("--%v", err)
			}
			r, err := traffic.RunHTTP(cmd.Context(), c)
			if err != nil {
				return err
			}
			if output == "json" {
				if err := traffic.WriteHTTP(e.stdout, r); err != nil {
					return err
				}
			} else {
				l := r.LatencyUs
				fmt.Fprintf(e.stdout, "%s x%d: %.0f requests/s, %d in %.1f s over %s; latency us: mean %.1f p50 %.1f p90 %.1f p99 %.1f max %.1f\n",
					r.Mode, r.Concurrency, r.PerSecond, r.Requests, r.Seconds, plural.N(int(r.Connections), "connection"),
					l.Mean, l.P50, l.P90, l.P99, l.Max)
				if k := r.ConnectUs; k != nil {
					fmt.Fprintf(e.stdout, "connect alone, us: mean %.1f p50 %.1f p90 %.1f p99 %.1f max %.1f\n",
						k.Mean, k.P50, k.P90, k.P99, k.Max)
				}
				fmt.Fprintf(e.stdout, "statuses: %s\n", r.StatusList())
				if r.FirstError != "" {
					fmt.Fprintf(e.stdout, "first error: %s\n", r.FirstError)
				}
			}
			if r.Requests == 0 {
				return errors.New("no request completed: the server did not answer within the run")
			}
			if r.Unexpected > 0 {
				return fmt.Errorf("%d of %s unexpected (statuses %s; expected %v)",
					r.Unexpected, plural.N(int(r.Requests), "request"), r.StatusList(), c.Expect)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.URL, "url", "", "server URL, http://host[:port]/path[?query]")
	f.StringVar(&c.Method, "method", "GET", "request method")
	f.StringArrayVar(&c.Headers, "header", nil, `request header "Key: value" (repeatable)`)
	f.StringVar(&c.Host, "host", "", "Host header (default: the URL's host)")
	f.StringVar(&c.Mode, "mode", traffic.HTTPKeepAlive, "keepalive (a connection per worker) or new (a connection per request)")
	f.IntVar(&c.Concurrency, "concurrency", 1, "workers, each with one request at a time")
	f.DurationVar(&c.Duration, "duration", 10*time.Second, "length of the run (with --requests: a limit)")
	f.IntVar(&c.Requests, "requests", 0, "requests in all (0: as many as fit in --duration)")
	f.DurationVar(&c.Timeout, "timeout", 5*time.Second, "per request, connect included")
	f.IntSliceVar(&c.Expect, "expect", []int{200}, "expected statuses (repeatable, or comma-separated)")
	f.StringVarP(&output, "output", "o", "", "output: json")
	return cmd
}
