package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/topology"
	"github.com/spf13/cobra"
)

// observeOpts are the flags of cnlab observe.
type observeOpts struct {
	from, to, namespaces, labels, protocols, verdicts, types []string
	ports                                                    []uint
	since                                                    string
	last, count                                              int
	follow, summary, withLabels                              bool
	duration                                                 time.Duration
	output                                                   string
}

func newObserveCmd(e *env) *cobra.Command {
	var o observeOpts
	cmd := &cobra.Command{
		Use:   "observe LAB [--from EP] [--to EP] [--verdict V] [--type T] [--since D] [--last N] [--follow] [--summary] [-o json]",
		Short: "Show the flows a lab recorded: who talked to whom, and which policy rule forwarded or dropped it",
		Long: `Print the flows a lab's recorder wrote, on any datapath: time, host,
verdict (forwarded, dropped, redirected to the L7 proxy, translated by a
Service), source and destination endpoints, addresses, ports, protocol and
TCP flags, the reason, the direction and endpoint whose side decided, and
the policy rule that decided it (kind, namespace/name, the rule's YAML path,
and a cluster policy's tier, priority and action); the L7 proxy's requests
add the request line and status, Service translations the frontend and the
backend chosen.

A lab records when its observe level is not off (cnlab up --observe
drops|all, or observe: in the topology file; on a running lab, cnlab up
--name LAB --observe LEVEL changes only that). drops records every denied
packet (once per flow and second); all also records the first packet of
every new flow at each verdict point. Sources: eBPF's ring buffer, the
NFLOG group of the iptables and nftables datapaths' log rules, conntrack's
events for Service translation, the L7 proxies' access logs.

Filters are hubble observe's: repeat a flag for alternatives; different
flags must all match. --from and --to take an endpoint (NS/NAME), a
namespace (NS/), an address or a CIDR. Without --follow, the last 20
matching flows are shown (--last N, --since D widen it); with --follow,
new flows as they come (after --last/--since's), until Ctrl-C, --count or
--duration. When a source could not keep up, the stream says how many
events it lost ({"lost":N,...} with -o json).`,
		Example: `  cnlab observe policy-lab --verdict dropped --to y/b
  cnlab observe policy-lab --follow -o json | jq 'select(.policy.name == "deny-all")'
  cnlab observe policy-lab --since 5m --summary
  cnlab observe policy-lab --type l7 --last 50
  cnlab observe policy-lab --follow --count 1 --duration 10s --verdict dropped   # wait for one drop`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("give the lab to observe: cnlab observe LAB")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runObserve(cmd.Context(), e, args[0], &o, cmd.Flags().Changed("last"))
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.from, "from", nil, "source: endpoint NS/NAME, namespace NS/, address or CIDR")
	f.StringArrayVar(&o.to, "to", nil, "destination: endpoint NS/NAME, namespace NS/, address or CIDR")
	f.StringArrayVar(&o.namespaces, "namespace", nil, "source or destination endpoint in this namespace")
	f.StringArrayVar(&o.labels, "label", nil, "source or destination endpoint has this label (KEY=VALUE or KEY)")
	f.UintSliceVar(&o.ports, "port", nil, "source or destination port")
	f.StringArrayVar(&o.protocols, "protocol", nil, "tcp, udp, icmp, or an IP protocol number")
	f.StringArrayVar(&o.verdicts, "verdict", nil, "forwarded, dropped, redirected or translated")
	f.StringArrayVar(&o.types, "type", nil, "drop, trace, l7 or service")
	f.StringVar(&o.since, "since", "", "flows of the last DURATION (5m), or since a time (RFC 3339)")
	f.IntVar(&o.last, "last", 20, "the last N matching flows (0: all; with --follow, default none)")
	f.BoolVarP(&o.follow, "follow", "f", false, "keep printing new flows until Ctrl-C")
	f.BoolVar(&o.summary, "summary", false, "counts per verdict, policy rule and endpoint pair over the window instead of flows")
	f.BoolVar(&o.withLabels, "labels", false, "add the endpoints' labels to each flow")
	f.IntVar(&o.count, "count", 0, "with --follow: stop after this many flows")
	f.DurationVar(&o.duration, "duration", 0, "with --follow: stop after this long")
	f.StringVarP(&o.output, "output", "o", "", "output format: json (one object per line)")
	return cmd
}

func runObserve(ctx context.Context, e *env, name string, o *observeOpts, lastSet bool) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if o.count < 0 || o.duration < 0 || o.last < 0 {
		return usagef("--count, --duration and --last cannot be negative")
	}
	if (o.count > 0 || o.duration > 0) && !o.follow {
		return usagef("--count and --duration apply with --follow")
	}
	if o.summary && o.follow {
		return usagef("--summary counts a window: give --since, not --follow")
	}
	flt := observe.Filter{From: o.from, To: o.to, Namespaces: o.namespaces, Protocols: o.protocols, Verdicts: o.verdicts, Types: o.types}
	for _, p := range o.ports {
		if p == 0 || p > 65535 {
			return usagef("--port %d: give a port from 1 to 65535", p)
		}
		flt.Ports = append(flt.Ports, uint16(p))
	}
	if err := flt.Check(); err != nil {
		return usagef("%v", err)
	}
	if o.since != "" {
		t, err := parseSince(o.since)
		if err != nil {
			return usagef("--since %q: %v", o.since, err)
		}
		flt.Since = t
	}
	if err := needRoot(); err != nil {
		return err
	}
	st, err := lab.ReadState(name)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no lab %s (see cnlab status)", name)
	}
	if err != nil {
		return err
	}
	spec := st.Spec
	if spec == nil || spec.Chain != nil {
		return fmt.Errorf("lab %s is a chain: it has no policy datapath to observe", name)
	}
	if len(o.labels) > 0 {
		flt.Labeled = observe.Labeled(spec, o.labels)
	}
	level := spec.ObserveLevel()
	if level == topology.ObserveOff {
		fmt.Fprintf(e.stderr, "cnlab: note: lab %s records no flows (observe: off); record them with: cnlab up --name %s ... --observe drops (or all)\n", name, name)
		if o.follow {
			return fmt.Errorf("lab %s records no flows: nothing to follow", name)
		}
	} else if !lab.RecorderRunning(name) {
		fmt.Fprintf(e.stderr, "cnlab: note: lab %s's recorder is not running (observe: %s): flows since it stopped are missing\n", name, level)
	}
	// The window: the matching records, the last N of them kept.
	n := o.last
	if o.follow && !lastSet {
		n = 0
		if o.since == "" {
			n = -1 // following from now: no history
		}
	} else if !lastSet && (o.since != "" || o.summary) {
		n = 0
	}
	var hist []observe.Record
	var sum observe.Summary
	end, err := observe.Read(name, func(r observe.Record) error {
		if r.Flow != nil && !flt.Match(r.Flow) {
			return nil
		}
		if r.Lost != nil && !flt.Since.IsZero() && r.Lost.Time.Before(flt.Since) {
			return nil
		}
		if o.summary {
			sum.Add(r)
			return nil
		}
		if n < 0 {
			return nil
		}
		hist = append(hist, r)
		if n > 0 && len(hist) > 2*n {
			hist = append(hist[:0], hist[len(hist)-n:]...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the flows of lab %s: %w", name, err)
	}
	if o.summary {
		sum.Done()
		if o.output == "json" {
			return json.NewEncoder(e.stdout).Encode(&sum)
		}
		sum.Print(e.stdout)
		return nil
	}
	if n > 0 && len(hist) > n {
		hist = hist[len(hist)-n:]
	}
	for _, r := range hist {
		if err := printRecord(e, o, r); err != nil {
			return err
		}
	}
	if !o.follow {
		if len(hist) == 0 && o.output != "json" {
			fmt.Fprintln(e.stderr, "no flows match")
		}
		return nil
	}
	lim := streamLimit{count: o.count, duration: o.duration, what: "flow"}
	ctx, cancel := lim.context(ctx)
	defer cancel()
	alive := func() error {
		s, err := lab.ReadState(name)
		if err != nil || s.Created != st.Created {
			return fmt.Errorf("lab %s was taken down", name)
		}
		return nil
	}
	err = observe.Follow(ctx, name, end, alive, func(r observe.Record) error {
		if r.Flow != nil && !flt.Match(r.Flow) {
			return nil
		}
		if err := printRecord(e, o, r); err != nil {
			return err
		}
		if r.Flow == nil {
			return nil
		}
		return lim.saw()
	})
	return lim.end(ctx, err)
}

// printRecord prints a flow or a lost-events record.
func printRecord(e *env, o *observeOpts, r observe.Record) error {
	if r.Flow != nil && !o.withLabels {
		r.Flow.FromLabels, r.Flow.ToLabels = nil, nil
	}
	if o.output == "json" {
		var v any = r.Flow
		if r.Lost != nil {
			v = r.Lost
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(e.stdout, string(b))
		return err
	}
	if r.Lost != nil {
		_, err := fmt.Fprintln(e.stdout, observe.LostLine(r.Lost))
		return err
	}
	_, err := fmt.Fprintln(e.stdout, observe.Line(r.Flow))
	return err
}

// parseSince reads --since: a duration back from now, or a time.
func parseSince(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("a duration back from now cannot be negative")
		}
		return time.Now().Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(secs, 0), nil
	}
	return time.Time{}, fmt.Errorf("give a duration (5m, 1h) or a time (RFC 3339)")
}
