package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cnlab/cnlab/datapath/ebpf"
	"github.com/cnlab/cnlab/datapath/kind"
	"github.com/cnlab/cnlab/internal/plural"
	"github.com/cnlab/cnlab/lab"
	"github.com/spf13/cobra"
)

func newMonitorCmd(e *env) *cobra.Command {
	var typ, output string
	var count int
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "monitor LAB [--type drop|all] [-o json]",
		Short: "Stream the eBPF datapath's verdicts as they happen",
		Long: `Print one line per verdict of the eBPF datapath's programs: time, host,
the endpoint side that decided, verdict and reason, source and destination
endpoints with their identities, the 5-tuple, and the policy rule behind it.
Events are rate-limited to one per flow and reason per second, so a flood
cannot slow the datapath; with no monitor running the programs report
nothing. Stops on Ctrl-C (exit 0), after --count events, or after
--duration; with both, fewer than --count events when --duration is up
exits 1. Exits 1 if the lab is taken down meanwhile (also if it is up
again by then: it is another lab, with other programs).`,
		Example: `  cnlab monitor policy-lab                 # drops only
  cnlab monitor policy-lab --type all -o json | jq 'select(.to == "y/b")'
  cnlab monitor policy-lab --count 1 --duration 10s   # wait for one drop`,
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
			spec, m, err := lab.Model(args[0], false)
			if err != nil {
				return err
			}
			if spec.Datapath != kind.EBPF {
				return usagef("lab %s uses the %s datapath: monitor reads the eBPF datapath's events (up a lab with --datapath %s)", spec.Name, spec.Datapath, kind.EBPF)
			}
			c, err := m.Compile()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			errTimeUp := errors.New("--duration is up")
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeoutCause(ctx, duration, errTimeUp)
				defer cancel()
			}
			errDone := errors.New("done")
			seen := 0
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
				if output == "json" {
					b, err := json.Marshal(ev)
					if err != nil {
						return err
					}
					fmt.Fprintln(e.stdout, string(b))
				} else {
					fmt.Fprintln(e.stdout, formatEvent(ev))
				}
				seen++
				if count > 0 && seen >= count {
					return errDone
				}
				return nil
			})
			cause := context.Cause(ctx)
			switch {
			case errors.Is(err, errDone):
				return nil
			case errors.Is(err, ebpf.ErrLabGone):
				return err
			case err != nil && ctx.Err() == nil:
				return err
			case count > 0 && seen < count && errors.Is(cause, errTimeUp):
				// --count with --duration waits for events: a script must
				// tell "they came" from "time ran out". Ctrl-C is no
				// failure.
				return fmt.Errorf("%d of %s within %v", seen, plural.N(count, "event"), duration)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "drop", "verdicts to show: drop or all")
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
