package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cnlab/cnlab/lab"
	"github.com/cnlab/cnlab/observe"
	"github.com/cnlab/cnlab/probe"
	"github.com/cnlab/cnlab/topology"
)

// cellFlows are the flows observed for one probe cell that differs from
// the model (probe --explain; the "explain" list of -o json).
type cellFlows struct {
	From     string          `json:"from"`
	To       string          `json:"to"`
	Protocol string          `json:"protocol"`
	Port     int             `json:"port"`
	Flows    []*observe.Flow `json:"flows"`
	Note     string          `json:"note,omitempty"`
}

// explainer records a probe's flows: a lab that records nothing records
// everything (observe: all) for the probe's length, and goes back to off
// after it.
type explainer struct {
	lab     string
	start   time.Time
	level   string // the level the probe ran at
	restore func()
}

func startExplain(ctx context.Context, e *env, name string) (*explainer, error) {
	st, err := lab.ReadState(name)
	if err != nil {
		return nil, err
	}
	x := &explainer{lab: name, level: st.Spec.ObserveLevel(), restore: func() {}}
	if x.level == topology.ObserveOff {
		fmt.Fprintf(e.stderr, "cnlab: note: lab %s records no flows: recording every flow (observe: all) for this probe\n", name)
		if _, err := lab.SetObserve(ctx, name, topology.ObserveAll); err != nil {
			return nil, fmt.Errorf("--explain: %w", err)
		}
		x.level = topology.ObserveAll
		x.restore = func() {
			// Not the probe's context: a Ctrl-C must still put the
			// lab back to off.
			if _, err := lab.SetObserve(context.Background(), name, topology.ObserveOff); err != nil {
				fmt.Fprintf(e.stderr, "cnlab: lab %s: could not go back to observe off: %v\n", name, err)
			}
		}
	} else if !lab.RecorderRunning(name) {
		return nil, fmt.Errorf("--explain: lab %s's recorder is not running (observe: %s): cnlab up --name %s ... --observe %s starts it again", name, x.level, name, x.level)
	}
	x.start = time.Now()
	return x, nil
}

// explain collects the flows of the cells that differ from the model.
func (x *explainer) explain(wrong []probe.Cell) []cellFlows {
	// The recorder writes within 100 ms of a flow's verdict.
	time.Sleep(300 * time.Millisecond)
	out := make([]cellFlows, len(wrong))
	filters := make([]observe.Filter, len(wrong))
	for i, c := range wrong {
		out[i] = cellFlows{From: c.From, To: c.To, Protocol: c.Protocol, Port: c.Port, Flows: []*observe.Flow{}}
		filters[i] = observe.Filter{From: []string{c.From}, To: []string{c.To}, Protocols: []string{c.Protocol},
			Since: x.start}
	}
	_, _ = observe.Read(x.lab, func(r observe.Record) error {
		if r.Flow == nil {
			return nil
		}
		for i := range filters {
			if int(r.Flow.DstPort) == wrong[i].Port && filters[i].Match(r.Flow) {
				out[i].Flows = append(out[i].Flows, r.Flow)
			}
		}
		return nil
	})
	for i, c := range wrong {
		if len(out[i].Flows) > 0 {
			continue
		}
		switch {
		case c.Allowed && x.level == topology.ObserveDrops:
			out[i].Note = "no drop observed; the lab records drops only (observe: drops): forwarded flows are not recorded"
		case c.Allowed:
			out[i].Note = "no flow observed: no verdict point saw a new flow (it passed as established or untracked)"
		default:
			out[i].Note = "no flow observed: the packets were lost before any verdict point (no route, no listener, a timeout)"
		}
	}
	return out
}

// printExplain writes the flows of each differing cell under its line.
func printExplain(w io.Writer, labName string, cf []cellFlows) {
	for _, c := range cf {
		fmt.Fprintf(w, "  %s -> %s %s/%d, observed:\n", c.From, c.To, c.Protocol, c.Port)
		for i, f := range c.Flows {
			if i == 5 {
				fmt.Fprintf(w, "    ... and %d more (cnlab observe %s --from %s --to %s)\n", len(c.Flows)-5, labName, c.From, c.To)
				break
			}
			fmt.Fprintf(w, "    %s\n", observe.Line(f))
		}
		if c.Note != "" {
			fmt.Fprintf(w, "    %s\n", c.Note)
		}
	}
}
