package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/l7proxy"
	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

func newMonitorCmd(e *env) *cobra.Command {
	var typ, output string
	var l7 bool
	var count int
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "monitor LAB [--type drop|all] [--l7] [-o json]",
		Short: "Stream the eBPF datapath's verdicts, or the L7 proxies' requests, as they happen",
		Long: `Print one line per verdict of the eBPF datapath's programs: time, host,
the endpoint side that decided, verdict and reason, source and destination
endpoints with their identities, the 5-tuple, and the policy rule behind it.
Events are rate-limited to one per flow and reason per second, so a flood
cannot slow the datapath; with no monitor running the programs report
nothing. Stops on Ctrl-C (exit 0), after --count events, or after
--duration; with both, fewer than --count events when --duration is up
exits 1. Exits 1 if the lab is taken down meanwhile (also if it is up
again by then: it is another lab, with other programs).

On a lab that records its flows (observe: drops or all, any datapath),
monitor is an alias of cnlab observe LAB --follow: --type drop shows the
dropped flows, --l7 the L7 proxies' requests, in observe's format.

With --l7, print instead one line per HTTP request the lab's L7 proxies
judge (any datapath that enforces L7 rules): time, host, verdict, status,
source and destination endpoints with the source's identity, method, path
and host, and the time the proxy took; --type drop shows the denied ones
(403) only.`,
		Example: `  cnlab monitor policy-lab                 # drops only
  cnlab monitor policy-lab --type all -o json | jq 'select(.to == "y/b")'
  cnlab monitor policy-lab --count 1 --duration 10s   # wait for one drop
  cnlab monitor policy-lab --l7 --type all            # every HTTP request through the proxies`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("give the lab to monitor: cnlab monitor LAB")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			var level uint32
			switch typ {
			case "drop":
				level = ebpf.MonitorDrops
			case "all":
				level = ebpf.MonitorAll
			default:
				return usagef("--type %q: drop or all", typ)
			}
			if count < 0 || duration < 0 {
				return usagef("--count and --duration cannot be negative")
			}
			if err := needRoot(); err != nil {
				return err
			}
			converge(cmd.Context(), e, args[0])
			if lab.RecorderRunning(args[0]) {
				// The lab records its flows: monitor is observe --follow
				// (its recorder reads the ring buffers; a second reader
				// would split their events).
				o := observeOpts{follow: true, count: count, duration: duration, output: output, last: 0}
				if typ == "drop" {
					o.verdicts = []string{"dropped"}
				}
				if l7 {
					o.types = []string{"l7"}
				}
				return runObserve(cmd.Context(), e, args[0], &o, false)
			}
			spec, m, err := lab.Model(args[0], false)
			if err != nil {
				return err
			}
			if l7 {
				return monitorL7(cmd.Context(), e, spec, typ, output, count, duration)
			}
			if spec.Datapath != kind.EBPF {
				return usagef("lab %s uses the %s datapath: monitor reads the eBPF datapath's events without recording; on every datapath, record flows and follow them: cnlab up --name %s ... --observe drops; cnlab observe %s --follow", spec.Name, spec.Datapath, spec.Name, spec.Name)
			}
			c, err := m.Compile()
			if err != nil {
				return err
			}
			lim := streamLimit{count: count, duration: duration, what: "event"}
			ctx, cancel := lim.context(cmd.Context())
			defer cancel()
			started := func() {
				if output == "json" {
					return
				}
				until := "Ctrl-C to stop"
				if duration > 0 {
					until = "for " + duration.String()
				}
				fmt.Fprintf(e.stderr, "monitoring lab %s (%s); %s\n", spec.Name, map[string]string{"drop": "drops", "all": "all verdicts"}[typ], until)
			}
			err = ebpf.Monitor(ctx, spec, level, c.Rules, started, func(ev ebpf.Event) error {
				if err := printEvent(e, output, ev, func() string { return formatEvent(ev) }); err != nil {
					return err
				}
				return lim.saw()
			}, m.Policies...)
			if errors.Is(err, ebpf.ErrLabGone) {
				return err
			}
			return lim.end(ctx, err)
		},
	}
	cmd.Flags().StringVar(&typ, "type", "drop", "verdicts to show: drop or all")
	cmd.Flags().BoolVar(&l7, "l7", false, "show the HTTP requests the L7 proxies judge instead")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json (one object per line)")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many events (0: no limit)")
	cmd.Flags().DurationVar(&duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	return cmd
}

// formatEvent renders one verdict as a line.
func formatEvent(ev ebpf.Event) string {
	name := func(id string, ident uint32) string {
		if id == "" {
			id = "world"
		}
		if ident == 0 { // not looked up: a packet passed by conntrack
			return id
		}
		return fmt.Sprintf("%s(%d)", id, ident)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s %-7s %-20s %s -> %s %s %s -> %s, at %s of %s",
		ev.Time.Format("15:04:05.000000"), ev.Host, strings.ToUpper(ev.Verdict), ev.Reason,
		name(ev.From, ev.SrcIdentity), name(ev.To, ev.DstIdentity), ev.Protocol, ev.Src, ev.Dst,
		ev.Direction, ev.Endpoint)
	if ev.At == "connect" {
		b.WriteString(", refused at connect()")
	}
	if ev.Rule != "" {
		fmt.Fprintf(&b, " [%s]", ev.Rule)
	}
	return b.String()
}

// l7Event is one line of `monitor --l7 -o json`.
type l7Event struct {
	Host string `json:"host"`
	From string `json:"from,omitempty"` // the endpoints, when the addresses are endpoints'
	To   string `json:"to,omitempty"`
	l7proxy.LogEntry
}

// monitorL7 is `monitor --l7`: the proxies' access logs, followed.
func monitorL7(ctx context.Context, e *env, spec *topology.Spec, typ, output string, count int, duration time.Duration) error {
	var hosts []string
	for _, h := range spec.Hosts {
		hosts = append(hosts, h.Name)
	}
	byIP := map[string]string{}
	for _, ep := range spec.Endpoints {
		for _, a := range ep.Addrs() { // every family's
			byIP[a.String()] = ep.ID()
		}
	}
	endpoint := func(addrPort string) string {
		ap, err := netip.ParseAddrPort(addrPort)
		if err != nil {
			return ""
		}
		return byIP[ap.Addr().String()]
	}
	lim := streamLimit{count: count, duration: duration, what: "request"}
	ctx, cancel := lim.context(ctx)
	defer cancel()
	if output != "json" {
		until := "Ctrl-C to stop"
		if duration > 0 {
			until = "for " + duration.String()
		}
		fmt.Fprintf(e.stderr, "monitoring the L7 proxies of lab %s (%s); %s\n", spec.Name, map[string]string{"drop": "denied requests", "all": "every request"}[typ], until)
	}
	err := l7proxy.Follow(ctx, spec.Name, hosts, func(host string, le l7proxy.LogEntry) error {
		if typ == "drop" && le.Verdict != "denied" {
			return nil
		}
		ev := l7Event{Host: host, From: endpoint(le.Src), To: endpoint(le.Dst), LogEntry: le}
		err := printEvent(e, output, ev, func() string {
			from, to := ev.From, ev.To
			if from == "" {
				from = "world"
			}
			if to == "" {
				to = le.Dst
			}
			return fmt.Sprintf("%s %-5s %-14s %d %s(%d) -> %s %s %s host %s, %d µs", le.Time.Local().Format("15:04:05.000000"), host,
				strings.ToUpper(le.Verdict), le.Status, from, le.Identity, to, le.Method, le.Path, le.Host, le.Micros)
		})
		if err != nil {
			return err
		}
		return lim.saw()
	})
	return lim.end(ctx, err)
}

// printEvent prints one event: a JSON object per line with -o json, else
// the line text gives.
func printEvent(e *env, output string, v any, text func() string) error {
	if output != "json" {
		fmt.Fprintln(e.stdout, text())
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, string(b))
	return nil
}
